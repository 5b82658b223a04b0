package replica

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"
)

// leaderInfo is the election value: who leads and where its listeners are.
// The addresses are empty until the leader's daemon serves (Term.Serving).
type leaderInfo struct {
	ID   string `json:"id"`
	GRPC string `json:"grpc,omitempty"`
	HTTP string `json:"http,omitempty"`
}

func (l leaderInfo) String() string {
	b, _ := json.Marshal(l)
	return string(b)
}

// parseLeaderInfo reads an election value; one that is not JSON (a
// candidate that campaigns with its bare id) is taken as the id.
func parseLeaderInfo(v []byte) *leaderInfo {
	var l leaderInfo
	if json.Unmarshal(v, &l) != nil {
		return &leaderInfo{ID: string(v)}
	}
	return &l
}

// follower holds the daemon's addresses while this replica does not lead:
// /healthz is answered here, everything else goes to the leader.
type follower struct {
	log    *slog.Logger
	leader func() *leaderInfo
	grpc   net.Listener
	http   net.Listener
	hs     *http.Server
	// admin, if the daemon has an admin listener, answers the probes
	// (then its only paths); adminSrv serves it.
	admin    net.Listener
	adminSrv *http.Server

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

type targetKey struct{}

// startFollower binds cfg.Listen and cfg.HTTPListen and serves them until
// close; leader says where to forward to (nil: nowhere yet).
func startFollower(cfg Config, log *slog.Logger, leader func() *leaderInfo) (*follower, error) {
	flags := cfg.Flags.withDefaults()
	gl, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s (%s): %w", cfg.Listen, flags.Listen, err)
	}
	hl, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		gl.Close()
		return nil, fmt.Errorf("listen %s (%s): %w", cfg.HTTPListen, flags.HTTPListen, err)
	}
	f := &follower{log: log, leader: leader, grpc: gl, http: hl, conns: map[net.Conn]struct{}{}}
	if cfg.AdminListen != "" {
		al, err := net.Listen("tcp", cfg.AdminListen)
		if err != nil {
			gl.Close()
			hl.Close()
			return nil, fmt.Errorf("listen %s (%s): %w", cfg.AdminListen, flags.AdminListen, err)
		}
		f.admin = al
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = r.In.Context().Value(targetKey{}).(string)
			r.SetXForwarded()
		},
		// Log streams must reach the client as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "peloton: the leader did not answer: "+err.Error(), http.StatusBadGateway)
		},
	}
	mux := http.NewServeMux()
	probes := mux
	if f.admin != nil {
		probes = http.NewServeMux()
	}
	probes.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		l := leader()
		if l == nil {
			_, _ = io.WriteString(w, "ok (following; no leader known yet)\n")
			return
		}
		_, _ = fmt.Fprintf(w, "ok (following %s)\n", l.ID)
	})
	probes.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if l := leader(); l != nil {
			_, _ = fmt.Fprintf(w, "ok (following %s)\n", l.ID)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "not ready: following, and no leader is known\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		l := leader()
		if l == nil || l.HTTP == "" {
			http.Error(w, "peloton: no leader is serving yet; try again shortly", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, l.HTTP)))
	})
	f.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		if cfg.TLS {
			// TLS ends at the leader, which alone holds the clients'
			// identity: HTTP is forwarded as raw TCP, like gRPC.
			f.serveTCP(hl, func(l *leaderInfo) string { return l.HTTP })
			return
		}
		_ = f.hs.Serve(hl)
	}()
	go func() {
		defer f.wg.Done()
		f.serveTCP(gl, func(l *leaderInfo) string { return l.GRPC })
	}()
	if f.admin != nil {
		f.adminSrv = &http.Server{Handler: probes, ReadHeaderTimeout: 10 * time.Second}
		f.wg.Go(func() { _ = f.adminSrv.Serve(f.admin) })
	}
	log.Info("follower listening", "grpc", gl.Addr().String(), "http", hl.Addr().String())
	return f, nil
}

// serveTCP forwards every connection to the leader's address that target
// picks.
func (f *follower) serveTCP(l net.Listener, target func(*leaderInfo) string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		if !f.track(c) {
			c.Close()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.forward(c, target)
		}()
	}
}

// forward pipes c to the leader until either side closes. Without a leader
// it closes c: gRPC clients see an unavailable server and retry.
func (f *follower) forward(c net.Conn, target func(*leaderInfo) string) {
	defer f.untrack(c)
	l := f.leader()
	if l == nil || target(l) == "" {
		return
	}
	up, err := net.DialTimeout("tcp", target(l), forwardDialTimeout)
	if err != nil {
		f.log.Debug("forward to the leader", "leader", l.ID, "err", err)
		return
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		// Either side ending ends both.
		up.Close()
		c.Close()
		close(done)
	}()
	_, _ = io.Copy(c, up)
	up.Close()
	c.Close()
	<-done
}

func (f *follower) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *follower) untrack(c net.Conn) {
	c.Close()
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

// close frees the addresses and cuts every forwarded connection; it returns
// once nothing of the follower runs.
func (f *follower) close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.grpc.Close()
	f.http.Close()
	_ = f.hs.Close()
	if f.adminSrv != nil {
		_ = f.adminSrv.Close()
	} else if f.admin != nil {
		f.admin.Close()
	}
	f.wg.Wait()
}
