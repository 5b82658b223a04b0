// Package hostmgr is the host manager: it keeps the cache of hosts a backend
// reports, what each host has free, leases of hosts to placement engines,
// and launches and kills tasks through the backend, passing task events on to
// jobmgr through a subscription.
//
// Leases make concurrent placement safe: a leased host is offered to no other
// engine until the lease is committed, released or expires, and Commit checks
// again that every task fits before it reserves anything. Backends live in
// sub-packages (local, ...); this package must not import jobmgr, resmgr or
// placement.
package hostmgr
