// Package advisor is the host advisor: it reads what the host agents
// report through the cluster stack's API, classifies every host green,
// orange or red, measures each partition's pressure, moves hosts between
// the batch and the stateless partitions as load shifts (through
// hostmgr's SLA-checked partition moves), and derives each batch host's
// oversubscription factor for revocable work.
//
// The core (zones.go, moves.go, oversub.go) is pure: a round's input in,
// decisions out, with every threshold in Config. advisor.go runs rounds
// against a Cluster: the stack's gRPC API (cluster.go), whether the
// advisor runs in the stack's process (peloton up) or as its own daemon
// (peloton serve advisor).
package advisor
