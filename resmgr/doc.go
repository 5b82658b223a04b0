// Package resmgr is the resource manager: the tree of resource pools, each
// leaf pool's multi-priority pending queue, admission of gangs against pool
// capacity, and the hand-off queues between admission, placement and launch.
//
// It owns what a pool is entitled to and what it holds; it does not know how
// jobs are stored (jobmgr) or where tasks run (hostmgr). Data flows
// jobmgr -> resmgr -> placement -> jobmgr; resmgr must not import jobmgr,
// placement or hostmgr. Task states READY, PLACING and PLACED live only here,
// in memory: they are transient and rebuilt from PENDING on restart, which
// saves three etcd writes per task.
package resmgr
