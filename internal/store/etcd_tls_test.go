package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/etcdtls"
	"github.com/peloton-sched/peloton/internal/store"
	"github.com/peloton-sched/peloton/internal/store/storetest"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
)

// TestEtcdTLS: a store reaches an etcd that wants TLS and client
// certificates with the right files, and with the wrong ones fails with an
// error that says what is wrong, not only that etcd did not answer.
func TestEtcdTLS(t *testing.T) {
	e := storetest.StartTLSEtcd(t)
	open := func(files tlsfiles.Client) (*store.Etcd, error) {
		t.Helper()
		cfg, err := etcdtls.Config(files, []string{e.Endpoint}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return store.NewEtcd(ctx, store.EtcdConfig{Endpoints: []string{e.Endpoint}, TLS: cfg, DialTimeout: 2 * time.Second})
	}

	s, err := open(tlsfiles.Client{CAFile: e.CAFile, CertFile: e.ClientCert, KeyFile: e.ClientKey})
	if err != nil {
		t.Fatalf("with the right files: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Txn(ctx, store.Put("over-tls", []byte("yes"), store.MustNotExist)); err != nil {
		t.Fatal(err)
	}
	if kv, err := s.Get(ctx, "over-tls"); err != nil || string(kv.Value) != "yes" {
		t.Fatalf("read back %+v, %v", kv, err)
	}
	s.Close()

	for _, c := range []struct {
		name  string
		files tlsfiles.Client
		want  []string // any of them
	}{
		{"a CA that did not sign the server", tlsfiles.Client{CAFile: e.OtherCAFile, CertFile: e.ClientCert, KeyFile: e.ClientKey},
			[]string{"certificate signed by unknown authority"}},
		{"no client certificate", tlsfiles.Client{CAFile: e.CAFile},
			[]string{"certificate required", "bad certificate"}},
		{"a client certificate of another CA", tlsfiles.Client{CAFile: e.CAFile, CertFile: e.OtherCert, KeyFile: e.OtherKey},
			[]string{"unknown certificate authority", "bad certificate"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := open(c.files)
			if err == nil {
				s.Close()
				t.Fatal("connected")
			}
			msg := err.Error()
			found := false
			for _, w := range c.want {
				found = found || strings.Contains(msg, w)
			}
			if !found || !strings.Contains(msg, "TLS with "+strings.TrimPrefix(e.Endpoint, "https://")) {
				t.Errorf("error %q, want it to say TLS with the endpoint failed: %q", msg, c.want)
			}
		})
	}
}
