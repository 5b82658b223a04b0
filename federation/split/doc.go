// Package split holds the federation's pure splits: the global pool tree
// into each cluster's pools (Pools), a federated service's instances over
// the clusters its placement names (Service) and its disruption budget over
// those parts (Budget), and the label language a placement selects clusters
// with (ValidateLabels, Matches).
//
// Everything here is a function over its arguments: no clock, no goroutine,
// no I/O, no state between calls. The federation reads its state, calls
// these and applies the result. It must import no Peloton component (the
// federation itself included), only internal value packages (resources,
// apierr) and the API types.
package split
