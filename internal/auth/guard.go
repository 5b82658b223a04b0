package auth

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/peloton-sched/peloton/internal/reload"
)

// Config configures a daemon's guard. The zero value authenticates nobody
// and allows everything: the development mode of `peloton up` on loopback.
type Config struct {
	// TokenFile, if set, is the token file (see ParseTokens); callers may
	// then present a bearer token. It is read again when it changes.
	TokenFile string
	// ClientCerts says the listener verifies client certificates (mutual
	// TLS): a certificate's holder is a principal (see certIdentity).
	ClientCerts bool
	// PolicyFile, if set, is the authorization policy (see ParsePolicy),
	// read again when it changes. Without one, every authenticated caller
	// may call everything.
	PolicyFile string
	// AuditFile, if set, receives an audit line per mutating or refused
	// call: a file appended to, or "-" for standard output.
	AuditFile string
	// RatePerSecond, if > 0, is each principal's sustained rate of calls,
	// with bursts of RateBurst; over it calls fail ResourceExhausted.
	RatePerSecond float64
	RateBurst     int
	// HandlerTimeout, if > 0, bounds every unary call on the server side,
	// whatever deadline the caller set (or did not).
	HandlerTimeout time.Duration
	// JobTokens, if set, are the jobs' own tokens a caller may present as
	// a bearer token, with or without authentication: their holders may
	// call only the rules marked JobToken, on their own job.
	JobTokens *JobTokens
	Log       *slog.Logger
}

// Guard authenticates, limits, authorizes, bounds and audits the calls of
// one daemon's gRPC servers (and, through them, of its REST gateway).
type Guard struct {
	tokens  *reload.File[*Tokens]
	policy  *reload.File[*Policy]
	certs   bool
	audit   *Audit
	lim     *limiter
	timeout time.Duration
	rules   Rules
	log     *slog.Logger
	// jobTokens are the jobs' own tokens (Config.JobTokens).
	jobTokens *JobTokens
	// forwarded: this guard serves the daemon's in-memory listener and
	// takes the identity its REST gateway or its own components forward.
	forwarded bool
}

// New builds a guard enforcing rules; it fails if a file does not load.
func New(cfg Config, rules Rules) (*Guard, error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	g := &Guard{certs: cfg.ClientCerts, timeout: cfg.HandlerTimeout, rules: rules, log: log.With("component", "auth"),
		lim: newLimiter(cfg.RatePerSecond, cfg.RateBurst), jobTokens: cfg.JobTokens}
	var err error
	if cfg.TokenFile != "" {
		g.tokens, err = reload.New([]string{cfg.TokenFile}, func() (*Tokens, error) { return loadFile(cfg.TokenFile, ParseTokens) }, g.log)
		if err != nil {
			return nil, fmt.Errorf("--auth-token-file %s: %w", cfg.TokenFile, err)
		}
	}
	if cfg.PolicyFile != "" {
		// Without authentication every caller is anonymous and a policy
		// would be silently ignored: everything allowed.
		if !g.Authenticating() {
			return nil, fmt.Errorf("--authz-policy-file %s: a policy needs callers to authenticate (a token file or client certificates)", cfg.PolicyFile)
		}
		g.policy, err = reload.New([]string{cfg.PolicyFile}, func() (*Policy, error) { return loadFile(cfg.PolicyFile, ParsePolicy) }, g.log)
		if err != nil {
			return nil, fmt.Errorf("--authz-policy-file %s: %w", cfg.PolicyFile, err)
		}
	}
	if cfg.AuditFile != "" {
		if g.audit, err = OpenAudit(cfg.AuditFile); err != nil {
			return nil, fmt.Errorf("--audit-log: %w", err)
		}
	}
	return g, nil
}

func loadFile[T any](path string, parse func([]byte) (T, error)) (T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var zero T
		return zero, err
	}
	return parse(b)
}

// Authenticating says whether callers must prove who they are.
func (g *Guard) Authenticating() bool { return g.tokens != nil || g.certs }

// Authorizing says whether a policy decides what they may do.
func (g *Guard) Authorizing() bool { return g.policy != nil }

// Holds says whether ctx's caller holds role cluster-wide: always without
// a policy (every authenticated caller may do everything then).
func (g *Guard) Holds(ctx context.Context, role Role) bool {
	if g.policy == nil {
		return true
	}
	id, ok := FromContext(ctx)
	return ok && g.policy.Get().Allows(id, role, "")
}

// Internal returns the guard of the daemon's in-memory listener: the same
// files, limits and audit log, taking the identity that the daemon's REST
// gateway or its own components forward. Never serve it on a socket.
func (g *Guard) Internal() *Guard {
	c := *g
	c.forwarded = true
	return &c
}

// Close closes the audit log.
func (g *Guard) Close() error {
	if g.audit != nil {
		return g.audit.Close()
	}
	return nil
}

// ReopenAudit reopens the audit file (after the operator rotated it).
func (g *Guard) ReopenAudit() error {
	if g.audit == nil {
		return nil
	}
	return g.audit.Reopen()
}

// ServerOptions are the interceptors a gRPC server of the daemon runs.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream)}
}

// call is what the guard knows of one call, for its checks and the audit.
type call struct {
	method    string
	rule      Rule
	known     bool
	id        Identity
	requestID string
	start     time.Time
}

func (g *Guard) begin(ctx context.Context, method string) (*call, error) {
	c := &call{method: method, start: time.Now()}
	c.rule, c.known = g.rules[method]
	c.requestID = requestIDOf(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs(RequestIDHeader, c.requestID))
	id, err := g.identify(ctx)
	c.id = id
	if err != nil {
		return c, err
	}
	return c, g.limit(id)
}

func (g *Guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	c, err := g.begin(ctx, info.FullMethod)
	if err == nil {
		err = g.authorize(ctx, c, req)
	}
	if err != nil {
		g.record(c, req, err)
		return nil, err
	}
	ctx = WithIdentity(ctx, c.id)
	if g.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}
	resp, err := h(ctx, req)
	if err == nil && c.rule.Filter != nil && g.filtering(c.id) {
		c.rule.Filter(resp, func(pool string) bool { return g.policy.Get().Allows(c.id, Viewer, pool) })
	}
	if c.rule.Mutating {
		g.record(c, req, err)
	}
	return resp, err
}

func (g *Guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx := ss.Context()
	c, err := g.begin(ctx, info.FullMethod)
	// A stream whose rule reads its request is authorized on its first
	// message; others before the handler runs.
	if err == nil && c.rule.Pools == nil {
		err = g.authorize(ctx, c, nil)
	}
	if err != nil {
		g.record(c, nil, err)
		return err
	}
	gs := &guardedStream{ServerStream: ss, ctx: WithIdentity(ctx, c.id)}
	if c.rule.Pools != nil {
		gs.check = func(m any) error {
			if err := g.authorize(ctx, c, m); err != nil {
				g.record(c, m, err)
				return err
			}
			return nil
		}
	}
	err = h(srv, gs)
	first, denied := gs.state()
	if denied != nil {
		// Recorded when refused; and the refusal is the call's answer
		// even if the handler made light of the error it got.
		return denied
	}
	if c.rule.Mutating {
		g.record(c, first, err)
	}
	return err
}

// guardedStream authorizes a stream on its first message: until that
// message is allowed nothing is sent, and once refused the stream only
// answers with the refusal.
type guardedStream struct {
	grpc.ServerStream
	ctx   context.Context
	check func(any) error

	// A handler may receive in one goroutine and send in another.
	mu      sync.Mutex
	checked bool
	first   any
	denied  error
}

func (s *guardedStream) Context() context.Context { return s.ctx }

func (s *guardedStream) state() (first any, denied error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, s.denied
}

func (s *guardedStream) RecvMsg(m any) error {
	if _, denied := s.state(); denied != nil {
		return denied
	}
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checked {
		return nil
	}
	s.checked, s.first = true, m
	if s.check != nil {
		s.denied = s.check(m)
	}
	return s.denied
}

func (s *guardedStream) SendMsg(m any) error {
	s.mu.Lock()
	denied, early := s.denied, s.check != nil && !s.checked
	s.mu.Unlock()
	if denied != nil {
		return denied
	}
	if early {
		return status.Error(codes.PermissionDenied, "a stream answers only once its request is authorized: receive it first")
	}
	return s.ServerStream.SendMsg(m)
}

// Metadata keys the guard reads or sets.
const (
	// RequestIDHeader carries a call's request id: the caller's if it sent
	// one, else one made up; the answer's header carries it back.
	RequestIDHeader = "x-request-id"
	// The identity forwarded over the in-memory listener. The REST gateway
	// refuses these from outside (see IncomingHeaderMatcher).
	fwdPrincipal = "x-peloton-principal"
	fwdGroups    = "x-peloton-groups"
	fwdMethod    = "x-peloton-auth"
	fwdPeer      = "x-peloton-peer"
)

func requestIDOf(ctx context.Context) string {
	var v []string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		v = md.Get(RequestIDHeader)
	}
	return requestID(v)
}

// requestID is the caller's request id if it sent one that will do, else
// a new one.
func requestID(v []string) string {
	if len(v) == 1 && len(v[0]) <= 128 && v[0] != "" {
		return v[0]
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errNoCredentials is the message of a call without credentials.
const errNoCredentials = "this server requires a bearer token or a client certificate"

func (g *Guard) identify(ctx context.Context) (Identity, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if g.forwarded {
		return g.forwardedIdentity(md)
	}
	peerAddr := peerAddr(ctx)
	if id, ok, err := g.jobTokenIdentity(ctx, md.Get("authorization"), peerAddr); ok {
		return id, err
	}
	if g.tokens != nil {
		if v := md.Get("authorization"); len(v) > 0 {
			tok, ok := bearerToken(v)
			if !ok {
				return Identity{Peer: peerAddr}, status.Error(codes.Unauthenticated, "the authorization header must be exactly one \"Bearer <token>\"")
			}
			id, ok := g.tokens.Get().Lookup(tok)
			if !ok {
				return Identity{Peer: peerAddr}, status.Error(codes.Unauthenticated, "the bearer token is not valid")
			}
			id.Peer = peerAddr
			return id, nil
		}
	}
	if g.certs {
		if id, ok := peerCertIdentity(ctx); ok {
			id.Peer = peerAddr
			return id, nil
		}
	}
	if !g.Authenticating() {
		return Identity{Principal: Anonymous, Method: MethodNone, Peer: peerAddr}, nil
	}
	return Identity{Peer: peerAddr}, status.Error(codes.Unauthenticated, errNoCredentials)
}

func bearerToken(v []string) (string, bool) {
	if len(v) != 1 {
		return "", false
	}
	scheme, tok, ok := strings.Cut(v[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(tok) == "" {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// forwardedIdentity reads the identity forwarded over the in-memory
// listener; exactly one of each key, or none at all.
func (g *Guard) forwardedIdentity(md metadata.MD) (Identity, error) {
	raw := func(k string) (string, bool) {
		v := md.Get(k)
		if len(v) != 1 {
			return "", len(v) == 0
		}
		return v[0], true
	}
	one := func(k string) (string, bool) {
		v, ok := raw(k)
		s, err := unescape(v)
		return s, ok && err == nil
	}
	method, ok1 := one(fwdMethod)
	principal, ok2 := one(fwdPrincipal)
	groups, ok3 := raw(fwdGroups)
	peer, ok4 := one(fwdPeer)
	var groupList []string
	if ok3 && groups != "" {
		groupList, ok3 = unescapeList(groups)
	}
	if !(ok1 && ok2 && ok3 && ok4) {
		return Identity{}, status.Error(codes.Unauthenticated, "a forwarded identity must carry each of its keys once")
	}
	if method == "" {
		if g.Authenticating() {
			return Identity{Peer: peer}, status.Error(codes.Unauthenticated, errNoCredentials)
		}
		return Identity{Principal: Anonymous, Method: MethodNone, Peer: peer}, nil
	}
	id := Identity{Principal: principal, Groups: groupList, Method: method, Peer: peer}
	if method == MethodNone && g.Authenticating() {
		return Identity{Peer: peer}, status.Error(codes.Unauthenticated, errNoCredentials)
	}
	return id, nil
}

func (g *Guard) limit(id Identity) error {
	if g.lim == nil || id.Method == MethodInProcess {
		return nil
	}
	key := id.Method + ":" + id.Principal
	if id.Method == MethodNone {
		// Without authentication, each address is its own caller.
		host, _, err := net.SplitHostPort(id.Peer)
		if err != nil {
			host = id.Peer
		}
		key = "addr:" + host
	}
	ok, wait := g.lim.allow(key)
	if ok {
		return nil
	}
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit: %s makes more than %g calls a second; retry in %s", id.Principal, float64(g.lim.rate), wait.Round(time.Millisecond)))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
		st = d
	}
	return st.Err()
}

// filtering says whether list responses are filtered for id.
func (g *Guard) filtering(id Identity) bool {
	return g.policy != nil && id.Method != MethodNone && id.Method != MethodInProcess
}

func (g *Guard) authorize(ctx context.Context, c *call, req any) error {
	short := shortMethod(c.method)
	if !c.known {
		return status.Errorf(codes.PermissionDenied, "%s has no authorization rule; nobody may call it", short)
	}
	if c.id.Method == MethodJobToken {
		return authorizeJobToken(c, req)
	}
	if c.id.Method == MethodNone || (g.policy == nil && c.id.Method != MethodInProcess) {
		return nil
	}
	pol := g.policy
	allows := func(pool string) bool {
		if pol == nil {
			return (&Policy{}).Allows(c.id, c.rule.Role, pool)
		}
		return pol.Get().Allows(c.id, c.rule.Role, pool)
	}
	if c.rule.Pools == nil {
		if c.rule.Filter != nil || allows("") {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "%s needs the %s role cluster-wide, which %s does not hold", short, c.rule.Role, c.id.Principal)
	}
	pools, err := c.rule.Pools(ctx, req)
	if err != nil {
		return err
	}
	if len(pools) == 0 && c.rule.Filter == nil {
		// A request that names no pool (an empty field) cannot be held
		// to a pool grant: allowing it outright would let anyone with a
		// token call it. It needs the role cluster-wide.
		if allows("") {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "%s names no pool, so it needs the %s role cluster-wide, which %s does not hold", short, c.rule.Role, c.id.Principal)
	}
	for _, p := range pools {
		if !allows(p) {
			return status.Errorf(codes.PermissionDenied, "%s needs the %s role on pool %s, which %s does not hold", short, c.rule.Role, p, c.id.Principal)
		}
	}
	return nil
}

func shortMethod(full string) string {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(full, '.'); i >= 0 {
		full = full[i+1:]
	}
	return strings.Replace(full, "/", ".", 1)
}

// record writes the audit line of a call that ended with err.
func (g *Guard) record(c *call, req any, err error) {
	if g.audit == nil {
		return
	}
	st := status.Convert(err)
	if err != nil && st.Code() == codes.Unknown {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			st = status.FromContextError(err)
		}
	}
	e := AuditEntry{
		Time: c.start.UTC(), RequestID: c.requestID, Principal: c.id.Principal, Groups: c.id.Groups, AuthBy: c.id.Method,
		Peer: c.id.Peer, Method: c.method, Outcome: st.Code().String(), DurationMs: float64(time.Since(c.start).Microseconds()) / 1000,
	}
	if err != nil {
		e.Message = st.Message()
	}
	if c.rule.Object != nil && req != nil {
		e.Object = c.rule.Object(req)
	}
	if werr := g.audit.Write(e); werr != nil {
		g.log.Error("cannot write the audit log", "err", werr)
	}
}
