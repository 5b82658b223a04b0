package cluster

import (
	"bytes"
	"context"
	"testing"

	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/memstore"
)

// TestJobTokenKeyOutlivesARestart: the first daemon of a stack makes the
// job-token key and keeps it in the store; a restarted daemon (or another
// replica) reads the same one, so the tokens its jobs' runs hold still
// verify. A key of the wrong size is refused, not used.
func TestJobTokenKeyOutlivesARestart(t *testing.T) {
	ctx := context.Background()
	st := memstore.New(memstore.Options{})
	k1, err := loadJobTokenKey(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := loadJobTokenKey(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != 32 || !bytes.Equal(k1, k2) {
		t.Fatalf("keys %x and %x: want the same 32 bytes after a restart", k1, k2)
	}
	before, after := (&auth.JobTokens{Key: k1}).Mint("j1"), (&auth.JobTokens{Key: k2}).Mint("j1")
	if before != after {
		t.Errorf("job j1's token %q before the restart, %q after", before, after)
	}
	other, err := loadJobTokenKey(ctx, memstore.New(memstore.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(other, k1) {
		t.Error("two stacks made the same key")
	}
	bad := memstore.New(memstore.Options{})
	if _, err := bad.Txn(ctx, store.Put(jobTokenKeyKey, []byte("short"), store.MustNotExist)); err != nil {
		t.Fatal(err)
	}
	if _, err := loadJobTokenKey(ctx, bad); err == nil {
		t.Error("a 5-byte key was taken")
	}
}

// TestSelfScaleEnvAddresses: runs get dialable addresses, and none that
// the flags leave to the listener (port 0) before it has picked them.
func TestSelfScaleEnvAddresses(t *testing.T) {
	e := &selfScaleEnv{tokens: &auth.JobTokens{Key: make([]byte, 32)}}
	e.presetAddrs("127.0.0.1:0", "127.0.0.1:0")
	if env := e.env("j"); env["PELOTON_SERVER"] != "" || env["PELOTON_API"] != "" || env["PELOTON_JOB_TOKEN"] == "" {
		t.Errorf("before listening on port 0: %v", env)
	}
	e.presetAddrs(":5391", "0.0.0.0:5291")
	env := e.env("j")
	if env["PELOTON_SERVER"] != "127.0.0.1:5391" || env["PELOTON_API"] != "http://127.0.0.1:5291" {
		t.Errorf("from the flags: %v", env)
	}
}
