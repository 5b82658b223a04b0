package auth

import (
	"context"
	"crypto/x509"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// How a caller was identified.
const (
	// MethodNone: authentication is off; every caller is anonymous.
	MethodNone = "none"
	// MethodToken: a bearer token from the token file.
	MethodToken = "token"
	// MethodCertificate: a client certificate the listener verified.
	MethodCertificate = "certificate"
	// MethodInProcess: a component of the daemon itself (its host agents,
	// its advisor), over the daemon's in-memory listener.
	MethodInProcess = "in-process"
)

// The principals of a daemon's own components, which reach its API only
// in-process and hold fixed roles.
const (
	PrincipalAdvisor   = "system:advisor"
	PrincipalHostAgent = "system:host-agent"
)

var systemRoles = map[string]Role{PrincipalAdvisor: Operator, PrincipalHostAgent: Agent}

// Anonymous is the principal of every call when authentication is off.
const Anonymous = "anonymous"

// Identity is who makes a call.
type Identity struct {
	Principal string
	Groups    []string
	// Method is how the principal was established (Method* constants).
	Method string
	// Peer is the caller's network address.
	Peer string
}

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the identity of the call ctx belongs to, and whether
// there is one.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// certIdentity is the identity a verified client certificate names: the
// subject's common name, else its first DNS, URI or e-mail name; its
// organizations are the groups.
func certIdentity(c *x509.Certificate) (Identity, bool) {
	p := c.Subject.CommonName
	switch {
	case p != "":
	case len(c.DNSNames) > 0:
		p = c.DNSNames[0]
	case len(c.URIs) > 0:
		p = c.URIs[0].String()
	case len(c.EmailAddresses) > 0:
		p = c.EmailAddresses[0]
	}
	if strings.TrimSpace(p) == "" {
		return Identity{}, false
	}
	return Identity{Principal: p, Groups: append([]string(nil), c.Subject.Organization...), Method: MethodCertificate}, true
}

// peerCertIdentity is the identity of a gRPC call's verified client
// certificate, if it has one.
func peerCertIdentity(ctx context.Context) (Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return Identity{}, false
	}
	return certIdentity(ti.State.VerifiedChains[0][0])
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
