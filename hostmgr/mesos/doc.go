// Package mesos is the Mesos hostmgr backend: a cluster stack runs as a
// Mesos framework through the v1 scheduler HTTP API, with mesos-go's
// httpcli/httpsched callers, scheduler calls and events, and its RecordIO
// framing, in protobuf (the default) or JSON.
//
// The backend subscribes with a FrameworkInfo (name, role, principal,
// capabilities, failover timeout) and keeps the framework ID the master
// gives in the stack's store, so that a restarted stack or a standby that
// takes over subscribes as the same framework and keeps its tasks; the
// httpsched caller sends the Mesos-Stream-Id of the current subscription
// with every call.
//
// Offers become hosts: an agent's capacity is what it offered plus what
// our runs hold on it, its attributes are labels, and the text attribute
// PartitionAttribute names its partition. Launch records the run in the
// store, queues it for an offer of its agent, and the launcher ACCEPTs all
// runs waiting for an agent in one call, LAUNCH on that agent's offers,
// with resources and ports carved from what was offered. The members of
// a gang (LaunchSpec.Gang) launched on one agent wait GangWindow for each
// other and go in one LAUNCH_GROUP instead: a task group run by the
// DEFAULT executor, whose resources are carved with theirs, all of them or
// none. Offers nothing
// needs are declined with a filter after OfferHold; when nothing waits for
// IdleSuppress, offers are suppressed, and a launch that finds no offer
// revives them. A rescinded offer is dropped at once.
//
// Status updates map to Peloton states (mapStatus) and are acknowledged
// when they carry a uuid; an end is stored before it is acknowledged, so
// that an update the stack did not keep comes again. After every
// subscription the runs the store records as live are reconciled
// explicitly, then everything implicitly; runs Mesos does not know end
// LOST, and jobmgr runs them again. A stream that ends, or stays silent for
// HeartbeatMisses heartbeat intervals, is subscribed again with backoff;
// an ERROR event stops the backend (launches fail with the master's
// message). A FAILURE event for an agent ends its runs LOST.
//
// A master that is not there, or a URL that answers but not as a master
// (an HTML error page, say), never stops the backend: Start returns after
// the first failed attempt, the stack serves, and the backend subscribes
// again with backoff (MinBackoff doubling to MaxBackoff) for as long as it
// runs. As a hostmgr.SubstrateReporter it says meanwhile that the master
// is not reachable, since when, and why: the status code and the first
// line of the answer, or the connection's error, never a whole page (the
// HTTP client's error mapper cuts every error answer so). It logs when
// that changes, not at every attempt. Launches queued meanwhile wait for
// the master's offers.
//
// An agent with a maintenance window (an inverse offer, or offers that
// carry an unavailability) is unschedulable, and the backend, a
// hostmgr.MaintenanceSource, says it is down: hostmgr starts maintenance
// of its host, and jobmgr drains our runs off it as for `peloton host
// drain`. The inverse offer is accepted once no run of ours is left there.
// Offers that come without an unavailability again (the window ended or
// was cancelled) say it is up, and hostmgr completes the maintenance it
// started. Offers are not suppressed while an agent is in a window, since
// they are what shows its end.
//
// A run's persistent volume is reserved disk of the framework's role:
// RESERVE and CREATE in the ACCEPT of its first run, the volume itself in
// the next runs' ACCEPTs, DESTROY and UNRESERVE when it is released. Not
// built: task output (Logs says where it is). The
// package is tested against mesostest, a test master that speaks the v1
// scheduler protocol on the wire with mesos-go's types; no real Mesos
// master has run these tests.
package mesos
