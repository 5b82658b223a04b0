// Package jobmgr owns jobs and their tasks: the spec versions and runtime
// records in the store, the one task transition table, and the goal-state
// engine that drives every task's actual state towards its goal (enqueue to
// resmgr, launch placed tasks through hostmgr, retry failures, kill).
//
// jobmgr may import resmgr and hostmgr; nothing below it imports jobmgr.
// Events come back from hostmgr through a channel, placements from resmgr
// through GetPlacements.
package jobmgr
