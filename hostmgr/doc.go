// Package hostmgr is the host manager: it keeps the cache of hosts a backend
// reports, what each host has free, leases of hosts to placement engines,
// and launches and kills tasks through the backend, passing task events on to
// jobmgr through a subscription.
//
// Leases make concurrent placement safe: a leased host is offered to no other
// engine until the lease is committed, released or expires, and Commit checks
// again that every task fits before it reserves anything. A lease given a
// demand (HostFilter.Demand) holds only hosts enough for it, so that engines
// lease at the same time rather than in turn.
//
// It also owns host maintenance (maintenance.go): the one table of host
// state changes, the state persisted in the store, and the drain requests
// jobmgr consumes to move runs off a draining host. Only HOST_UP hosts are
// offered or committed to.
//
// And it owns each host's partition (partition.go): a move between
// partitions drains the host through the same requests, persists every
// step, and tells backends that keep partitions their own way
// (PartitionApplier). The capacity it reports to resmgr is per partition.
//
// Everything a backend says passes one gate on its way in (CleanEvent,
// cleanHosts): events, Status and run listings get their reason, message
// and host made valid UTF-8 and bounded (internal/sanitize), hosts their
// labels and partition; a host whose name is not valid UTF-8 is not used.
// A substrate's bytes can then never make a record unwritable.
//
// A backend whose substrate lives elsewhere (a Mesos master, a Kubernetes
// apiserver) says whether it reaches it (SubstrateReporter, substrate.go);
// while it does not, no host is offered, and the status is what the API
// gives as the reason work waits.
//
// It keeps what the host agents (package hostagent) last reported of their
// hosts and runs (usage.go, TakeUsage): a live reading in memory only, one
// report per host replacing the last, resends dropped by sequence; a run an
// agent's QoS controller revoked ends with ReasonQoSRevoked and runs again.
// From those readings it computes each host's slack (slack.go): what
// non-revocable work holds but does not use, less a margin, which is what
// revocable work is placed on; a host without a fresh report has none.
//
// It keeps the host advisor's advice (advice.go, PublishAdvice): zones,
// partitions' pressure and oversubscription factors, in memory and lapsing
// when the advisor stops renewing it; the factors scale the slack of batch
// hosts. Every partition move, by whoever asked, is recorded in the move
// history in the store, in the move's own transaction.
//
// It is the one host filter of placement spec against host (Matches,
// Holds): placement filters offers with it, and jobmgr follows a DAEMON
// job's hosts with it. A backend that finds work another system made for
// Peloton (ForeignSource: the kubernetes backend's pods) is handed to jobmgr
// through Foreign, for jobmgr to adopt.
//
// Manager is the host table and what works on it (hosts, holds, leases,
// launches, events); its two parts have their own types and locks:
// Maintenance (maintenance, partition moves, drains, the move history) and
// Usage (the host agents' reports, slack, advice). Consumers take small
// interfaces of their own over these, not the concrete types.
//
// Backends live in sub-packages (local, sim, kubernetes, mesos; backendtest
// is their conformance suite); this package must not import jobmgr, resmgr
// or placement.
package hostmgr
