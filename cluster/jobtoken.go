package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/jobmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// jobTokenKeyKey is where the stack keeps the key its jobs' tokens are
// signed with: made once, at random, by the first daemon of the stack, so
// that tokens hold across restarts and replicas. It never leaves etcd.
const jobTokenKeyKey = "auth/job-token-key"

// loadJobTokenKey returns the stack's job-token key, making it if there is
// none yet.
func loadJobTokenKey(ctx context.Context, st store.Store) ([]byte, error) {
	for range 3 {
		kv, err := st.Get(ctx, jobTokenKeyKey)
		if err == nil {
			if len(kv.Value) < 32 {
				return nil, fmt.Errorf("the job-token key in etcd (%s) is %d bytes, want 32", jobTokenKeyKey, len(kv.Value))
			}
			return kv.Value, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("read the job-token key: %w", err)
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		_, err = st.Txn(ctx, store.Put(jobTokenKeyKey, key, store.MustNotExist))
		if err == nil {
			return key, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return nil, fmt.Errorf("write the job-token key: %w", err)
		}
		// Another replica made it first: read theirs.
	}
	return nil, errors.New("cannot agree on a job-token key in etcd")
}

// jobLive is auth.JobTokens.Live: a job's token is good while the job
// exists here, scales itself and has not ended.
func jobLive(jm *jobmgr.Manager) func(context.Context, string) error {
	return func(_ context.Context, id string) error {
		j, err := jm.GetJob(id)
		if err != nil {
			return errors.New("the job is gone")
		}
		switch s := j.GetStatus().GetState(); s {
		case pelotonv1.JobState_JOB_SUCCEEDED, pelotonv1.JobState_JOB_FAILED, pelotonv1.JobState_JOB_KILLED:
			return fmt.Errorf("the job is %s", s)
		}
		if j.GetSpec().GetSelfScale() == nil {
			return errors.New("the job does not scale itself (spec.selfScale)")
		}
		return nil
	}
}

// selfScaleEnv gives the runs of a self-scaling job their token and the
// daemon's addresses. The addresses are known once the listeners are: a
// run launched before (after a restart) gets what the flags say.
type selfScaleEnv struct {
	tokens     *auth.JobTokens
	grpc, http atomic.Pointer[string]
	tls        bool
}

// presetAddrs takes the listen flags' addresses, unless a port is 0
// (picked when listening).
func (e *selfScaleEnv) presetAddrs(grpcAddr, httpAddr string) {
	for _, a := range []string{grpcAddr, httpAddr} {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "0" || port == "" {
			return
		}
	}
	e.setAddrs(grpcAddr, httpAddr)
}

func (e *selfScaleEnv) setAddrs(grpcAddr, httpAddr string) {
	e.grpc.Store(&grpcAddr)
	e.http.Store(&httpAddr)
}

// env is jobmgr.Options.SelfScaleEnv.
func (e *selfScaleEnv) env(jobID string) map[string]string {
	out := map[string]string{jobmgr.EnvJobToken: e.tokens.Mint(jobID)}
	if p := e.grpc.Load(); p != nil {
		out[jobmgr.EnvServer] = dialable(*p)
	}
	if p := e.http.Load(); p != nil {
		scheme := "http://"
		if e.tls {
			scheme = "https://"
		}
		out[jobmgr.EnvAPI] = scheme + dialable(*p)
	}
	return out
}

// dialable is a listen address a run on this machine can dial: an
// unspecified host (":7000", "0.0.0.0:7000") becomes the loopback.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
