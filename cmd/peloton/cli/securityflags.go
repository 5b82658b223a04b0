package cli

import (
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/serving"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
)

// securityFlags are the flags that secure a daemon's listeners and its
// connections to other daemons (docs/security.md).
type securityFlags struct {
	certFile, keyFile, clientCA   string
	tokenFile, policyFile, audit  string
	rateLimit                     float64
	rateBurst                     int
	handlerTimeout                time.Duration
	maxRequestBytes               int
	adminListen                   string
	insecure                      bool
	peerCA, peerCert, peerKey     string
	peerTokenFile, peerServerName string
}

// defaultMaxRequestBytes is the default of --max-request-bytes: a
// 100,000-instance job with overrides on every tenth instance fits.
const defaultMaxRequestBytes = 16 << 20

func (s *securityFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&s.certFile, "tls-cert-file", "", "PEM certificate (with its chain) the gRPC and HTTP listeners serve TLS with; read again when it changes")
	fs.StringVar(&s.keyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&s.clientCA, "client-ca-file", "", "PEM CA bundle that must have signed every client's certificate (mutual TLS; needs --tls-cert-file); a certificate's common name is its holder's principal, its organizations the groups")
	fs.StringVar(&s.tokenFile, "auth-token-file", "", "YAML file of bearer tokens and the principals and groups they stand for; read again when it changes")
	fs.StringVar(&s.policyFile, "authz-policy-file", "", "YAML file of the roles granted to principals and groups, per pool subtree or cluster-wide; read again when it changes (none: every authenticated caller may do everything)")
	fs.StringVar(&s.audit, "audit-log", "", `file every mutating or refused call is appended to as a JSON line ("-": standard output; reopened on SIGHUP)`)
	fs.Float64Var(&s.rateLimit, "rate-limit", 0, "calls per second each principal may make, sustained (0: no limit); over it calls fail ResourceExhausted with the time to wait")
	fs.IntVar(&s.rateBurst, "rate-burst", 100, "calls a principal may make at once beyond --rate-limit")
	fs.DurationVar(&s.handlerTimeout, "handler-timeout", 2*time.Minute, "longest any call may run on the server, whatever deadline its caller set (streams excepted)")
	fs.IntVar(&s.maxRequestBytes, "max-request-bytes", defaultMaxRequestBytes, "largest request accepted, gRPC (after decompression) or REST body; over it ResourceExhausted / HTTP 413")
	fs.StringVar(&s.adminListen, "admin-listen", "", "address of a plaintext listener without authentication serving only /metrics, /healthz and /readyz (empty: none)")
	fs.BoolVar(&s.insecure, "insecure", false, "allow listeners on non-loopback addresses without TLS and authentication (anyone who reaches them can do anything)")
	fs.StringVar(&s.peerCA, "peer-ca-file", "", "PEM CA bundle verifying the other daemons this one calls (federation <-> clusters); default: --client-ca-file")
	fs.StringVar(&s.peerCert, "peer-cert-file", "", "certificate this daemon presents to the daemons it calls; default: --tls-cert-file")
	fs.StringVar(&s.peerKey, "peer-key-file", "", "private key of --peer-cert-file; default: --tls-key-file")
	fs.StringVar(&s.peerTokenFile, "peer-token-file", "", "file holding a bearer token this daemon sends to the daemons it calls")
	fs.StringVar(&s.peerServerName, "peer-server-name", "", "name the other daemons' certificates must carry, instead of the host dialled")
}

// config checks the flags and returns the listeners' security; addrs maps
// each listener's flag to its address, for the refusal of an unsecured
// listener beyond loopback.
func (s *securityFlags) config(addrs map[string]string) (serving.Security, error) {
	sec := serving.Security{
		TLS: tlsfiles.Server{CertFile: s.certFile, KeyFile: s.keyFile, ClientCAFile: s.clientCA},
		Auth: auth.Config{TokenFile: s.tokenFile, PolicyFile: s.policyFile, AuditFile: s.audit,
			RatePerSecond: s.rateLimit, RateBurst: s.rateBurst, HandlerTimeout: s.handlerTimeout},
		MaxRequestBytes: s.maxRequestBytes,
		AdminListen:     strings.TrimSpace(s.adminListen),
		Insecure:        s.insecure,
	}
	if err := sec.TLS.Check([3]string{"--tls-cert-file", "--tls-key-file", "--client-ca-file"}); err != nil {
		return serving.Security{}, usageErrorf("invalid %v", err)
	}
	switch {
	case s.rateLimit < 0:
		return serving.Security{}, usageErrorf("invalid --rate-limit %g: must be >= 0", s.rateLimit)
	case s.rateBurst < 1:
		return serving.Security{}, usageErrorf("invalid --rate-burst %d: must be >= 1", s.rateBurst)
	case s.handlerTimeout <= 0:
		return serving.Security{}, usageErrorf("invalid --handler-timeout %s: must be > 0", s.handlerTimeout)
	case s.maxRequestBytes < 4<<10 || s.maxRequestBytes > 1<<30:
		return serving.Security{}, usageErrorf("invalid --max-request-bytes %d: must be 4096 to 1073741824", s.maxRequestBytes)
	}
	if sec.AdminListen != "" {
		if _, _, err := net.SplitHostPort(sec.AdminListen); err != nil {
			return serving.Security{}, usageErrorf("invalid --admin-listen %q: want host:port", sec.AdminListen)
		}
	}
	for flag, path := range map[string]string{"--auth-token-file": s.tokenFile, "--authz-policy-file": s.policyFile} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			return serving.Security{}, usageErrorf("invalid %s: %v", flag, err)
		}
	}
	if s.policyFile != "" && !sec.Authenticating() {
		return serving.Security{}, usageErrorf("invalid --authz-policy-file: a policy needs callers to authenticate (--auth-token-file or --client-ca-file)")
	}
	if err := serving.CheckExposure(sec, addrs); err != nil {
		return serving.Security{}, usageErrorf("%v", err)
	}
	return sec, nil
}

// peer returns the options of this daemon's connections to other daemons:
// the --peer-* files, else the listener's own certificate and client CA
// (one CA for the whole installation), and the token of --peer-token-file.
func (s *securityFlags) peer() (pclient.Options, error) {
	var o pclient.Options
	ca, cert, key := first(s.peerCA, s.clientCA), first(s.peerCert, s.certFile), first(s.peerKey, s.keyFile)
	if s.peerCA != "" || s.peerCert != "" || s.peerKey != "" || s.certFile != "" {
		files := tlsfiles.Client{CAFile: ca, CertFile: cert, KeyFile: key, ServerName: s.peerServerName}
		if err := files.Check([3]string{"--peer-ca-file", "--peer-cert-file", "--peer-key-file"}); err != nil {
			return o, usageErrorf("invalid %v", err)
		}
		o.TLS = &pclient.TLSFiles{CAFile: ca, CertFile: cert, KeyFile: key, ServerName: s.peerServerName}
	}
	if s.peerTokenFile != "" {
		b, err := os.ReadFile(s.peerTokenFile)
		if err != nil {
			return o, usageErrorf("invalid --peer-token-file: %v", err)
		}
		if o.Token = strings.TrimSpace(string(b)); o.Token == "" {
			return o, usageErrorf("invalid --peer-token-file %s: the file is empty", s.peerTokenFile)
		}
	}
	return o, nil
}

// checkPeerForUp checks that the federation `peloton up` runs can call its
// clusters (and they it) under the listeners' security: it must verify
// their certificate and be someone to their guard.
func (s *securityFlags) checkPeerForUp() error {
	if s.certFile != "" && first(s.peerCA, s.clientCA) == "" {
		return usageErrorf("missing --peer-ca-file: peloton up runs a federation that calls its clusters over TLS, and without --client-ca-file nothing says which CA signed --tls-cert-file")
	}
	mtls := s.clientCA != "" && first(s.peerCert, s.certFile) != ""
	if s.tokenFile != "" && !mtls && s.peerTokenFile == "" {
		return usageErrorf("missing --peer-token-file: peloton up runs a federation that calls its clusters, which want a token (--auth-token-file) from it; give it one of the file's tokens, or use client certificates (--client-ca-file)")
	}
	return nil
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
