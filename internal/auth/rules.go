package auth

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Rule is what one gRPC method needs.
type Rule struct {
	// Role is the right the call needs.
	Role Role
	// Pools returns the pools the call acts on; the caller needs Role on
	// every one. nil Pools: the call acts on the cluster itself (hosts,
	// partitions), and needs Role cluster-wide. An error ends the call
	// with it (say NotFound for a job that does not exist).
	Pools func(ctx context.Context, req any) ([]string, error)
	// Filter, for a call that lists things of many pools, drops from the
	// response what the caller may not view. The call itself then needs
	// only an authenticated caller; Pools, if set too, still applies (a
	// list narrowed to one pool). Filter is called with the response and
	// a test of whether the caller may view a pool.
	Filter func(resp any, canView func(pool string) bool)
	// Mutating calls are written to the audit log whatever their outcome;
	// reads only when refused.
	Mutating bool
	// Object names what the call acts on, for the audit log ("job 1234").
	Object func(req any) string
	// JobToken: a job's own token (MethodJobToken) may call it on its
	// own job (the request's job id); nothing else is open to one.
	JobToken bool
}

// Rules are a daemon's rules by full gRPC method name
// ("/peloton.api.v1.JobService/CreateJob").
type Rules map[string]Rule

// Check says which of the methods have no rule, as one error, or nil: a
// daemon checks its rules cover every method it serves before serving.
func (r Rules) Check(methods []string) error {
	var missing []string
	for _, m := range methods {
		if _, ok := r[m]; !ok {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("auth: no rule for %s", strings.Join(missing, ", "))
	}
	return nil
}

// Paths are the pools a call names, without the empty ones: an empty
// pool field is a mistake the handler refuses (InvalidArgument naming the
// field), not a call on the cluster as a whole.
func Paths(pools ...string) []string {
	var out []string
	for _, p := range pools {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}
