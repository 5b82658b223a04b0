// Package cli implements the peloton command-line tool with spf13/cobra.
//
// It owns the command tree, flag parsing, spec-file decoding (YAML or JSON
// that is the protobuf JSON mapping of JobSpec and PoolSpec), output
// rendering (table, json, yaml) and the mapping of errors to exit codes:
// 0 success, 1 failure (including any gRPC error), 2 usage error. It also
// owns the client's config file of named contexts (config.go) and how the
// connection settings are resolved from flags, environment and context
// (connect.go), which docs/cli-config.md describes for users.
//
// Client commands talk to a Peloton server only through the public gRPC API
// in proto/peloton/api/v1. The package must not import the scheduler's
// internals (jobmgr, resmgr, hostmgr, placement, internal/...); the one
// server-side package it uses is cluster, to run the stack for `peloton up`
// and `peloton serve cluster`.
//
// The package is run in-process by tests, so nothing in it calls os.Exit,
// writes to os.Stdout or os.Stderr directly, or keeps flag values in
// package variables: NewRootCommand builds a fresh tree for every call.
package cli
