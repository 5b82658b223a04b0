package cli

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pclient "github.com/peloton-sched/peloton/cluster/client"
)

// tokenEnv names the environment variable that gives --token's default.
// It is not shown as the flag's default, which --help would print.
const tokenEnv = "PELOTON_TOKEN"

// connSettings is where and how this invocation's client commands connect:
// the addresses (--server, --federation, --cluster), the TLS files and the
// token. Each setting remembers where it came from, so that a message can
// name the flag, variable or context field to change.
//
// Every setting is looked up in the same order: the flag if given, then
// its environment variable if it has one and it is set, then the context
// in use (--context, else the config file's currentContext), then the
// built-in default.
type connSettings struct {
	server, federation, cluster setting
	ca, cert, key, serverName   setting
	token                       setting
}

// setting is one resolved value and where it came from, e.g. "--server",
// "$PELOTON_SERVER" or `server of context "prod"`; "" for the built-in
// default.
type setting struct{ val, from string }

// name is how a message refers to the setting: where it came from, or
// flag when it is the default.
func (s setting) name(flag string) string {
	if s.from != "" {
		return s.from
	}
	return flag
}

// conn resolves the connection settings, once per invocation. Commands
// that connect to nothing (version, config, serve) never call it, so a
// broken config file does not stop them.
func (a *app) conn() (*connSettings, error) {
	if a.settings != nil {
		return a.settings, nil
	}
	cc, file, err := a.selectContext()
	if err != nil {
		return nil, err
	}
	if cc == nil {
		cc = &configContext{}
	}
	changed := func(flag string) bool { return a.globals != nil && a.globals.Changed(flag) }
	pick := func(flag, flagVal, env, field, ctxVal, def string) setting {
		switch {
		case changed(flag):
			return setting{flagVal, "--" + flag}
		case env != "" && a.getenv(env) != "":
			return setting{a.getenv(env), "$" + env}
		case ctxVal != "":
			return setting{ctxVal, fmt.Sprintf("%s of context %s", field, cc.Name)}
		}
		return setting{def, ""}
	}
	path := func(field, p string) (string, error) {
		r, err := a.configFilePath(file, p)
		if err != nil {
			return "", fmt.Errorf("config file %s: %s of context %s: %v", file, field, cc.Name, err)
		}
		return r, nil
	}
	s := &connSettings{
		server:     pick("server", a.server, serverEnv, "server", cc.Server, defaultServer),
		federation: pick("federation", a.fedAddr, federationEnv, "federation", cc.Federation, defaultFederation),
		serverName: pick("tls-server-name", a.tlsServerName, "", "tlsServerName", cc.TLSServerName, ""),
		token:      pick("token", a.token, tokenEnv, "token", cc.Token, ""),
	}
	// A context's cluster sends cluster commands through the federation;
	// --server or $PELOTON_SERVER say to send them to that server instead.
	ctxCluster := cc.Cluster
	if s.server.from == "--server" || s.server.from == "$"+serverEnv {
		ctxCluster = ""
	}
	s.cluster = pick("cluster", a.clusterName, "", "cluster", ctxCluster, "")
	for _, f := range []struct {
		flag, field, flagVal, ctxVal string
		dst                          *setting
	}{
		{"ca-file", "caFile", a.caFile, cc.CAFile, &s.ca},
		{"cert-file", "certFile", a.certFile, cc.CertFile, &s.cert},
		{"key-file", "keyFile", a.keyFile, cc.KeyFile, &s.key},
	} {
		*f.dst = pick(f.flag, f.flagVal, "", f.field, f.ctxVal, "")
		if f.dst.val != "" && !strings.HasPrefix(f.dst.from, "--") {
			// From the context: a path as written in the file.
			p, err := path(f.field, f.dst.val)
			if err != nil {
				return nil, err
			}
			f.dst.val = p
		}
	}
	if s.token.from == "" && cc.TokenFile != "" {
		p, err := path("tokenFile", cc.TokenFile)
		if err != nil {
			return nil, err
		}
		tok, err := pclient.ReadTokenFile(p)
		if err != nil {
			return nil, fmt.Errorf("config file %s: tokenFile of context %s: %v", file, cc.Name, err)
		}
		s.token = setting{tok, fmt.Sprintf("tokenFile %s of context %s", p, cc.Name)}
	}
	a.settings = s
	return s, nil
}

// selectContext reads the config file and returns the context in use
// (nil for none) and the file's path. --context "" uses none.
func (a *app) selectContext() (*configContext, string, error) {
	byFlag := a.globals != nil && a.globals.Changed("context")
	file, err := a.configPath()
	if err != nil {
		if byFlag && a.contextName != "" {
			return nil, "", usageErrorf("--context %s: %v", a.contextName, err)
		}
		return nil, "", nil // no config file to read: no contexts
	}
	cfg, exists, err := loadConfig(file)
	if err != nil {
		return nil, file, err
	}
	name := cfg.CurrentContext
	if byFlag {
		name = a.contextName
	}
	if name == "" {
		return nil, file, nil
	}
	if cc := cfg.find(name); cc != nil {
		return cc, file, nil
	}
	switch {
	case byFlag && !exists:
		return nil, file, usageErrorf("unknown --context %q: there is no config file at %s (make one with peloton config set-context)", name, file)
	case byFlag:
		return nil, file, usageErrorf("unknown --context %q: %s has %s", name, file, cfg.names())
	}
	return nil, file, fmt.Errorf("config file %s: currentContext %q names no context (it has %s); pick one with peloton config use-context NAME",
		file, name, cfg.names())
}

// home is the user's home directory, from the environment as
// os.UserHomeDir reads it (through getenv, which tests replace).
func (a *app) home() (string, error) {
	env := "HOME"
	if runtime.GOOS == "windows" {
		env = "USERPROFILE"
	}
	if h := a.getenv(env); h != "" {
		return h, nil
	}
	return "", fmt.Errorf("$%s is not set", env)
}

// tls is the TLS files to dial with, nil for plaintext: any of the CA, the
// client certificate and key, or a server name turns TLS on.
func (s *connSettings) tls() *pclient.TLSFiles {
	f := pclient.TLSFiles{CAFile: s.ca.val, CertFile: s.cert.val, KeyFile: s.key.val, ServerName: s.serverName.val}
	if f == (pclient.TLSFiles{}) {
		return nil
	}
	return &f
}

// options are the client options for a connection whose unary calls last
// at most timeout. Files that do not load are errors naming the flag or
// context field that gave them: usage errors for flags, plain errors for
// the config file.
func (s *connSettings) options(timeout time.Duration) (pclient.Options, error) {
	o := pclient.Options{Timeout: timeout, TLS: s.tls(), Token: s.token.val}
	if o.TLS != nil {
		err := o.TLS.Check([3]string{s.ca.name("--ca-file"), s.cert.name("--cert-file"), s.key.name("--key-file")})
		if err != nil {
			for _, f := range []setting{s.ca, s.cert, s.key} {
				if strings.HasPrefix(f.from, "--") {
					return o, usageErrorf("%v", err)
				}
			}
			return o, err
		}
	}
	return o, nil
}

// dialError says why a client could not be made for addr (named by flag).
func (s *connSettings) dialError(flag, addr string, err error) error {
	if errors.Is(err, pclient.ErrPlaintextToken) {
		return usageErrorf("the token (from %s) is sent only over TLS or to a loopback address, and %s %s is neither: "+
			"give the CA of its certificate with --ca-file (or use a context with caFile), or send no token with --token \"\"", s.token.from, flag, addr)
	}
	return usageErrorf("invalid %s %q: %v", flag, addr, err)
}

// securityError is a call that failed because of the connection's security
// - the server's certificate, the client's, TLS on one side only, the
// token - said with what to change. It keeps the call's status for
// status.Code; formatError prints its own words.
type securityError struct {
	st  *status.Status
	msg string
}

func (e *securityError) Error() string              { return e.msg }
func (e *securityError) GRPCStatus() *status.Status { return e.st }

// explain turns a failed call to what (e.g. "the peloton server at
// 10.0.0.1:5391") into a securityError when its cause is the connection's
// security, or returns nil. connected says whether the connection was up
// after the call: the TLS failures all happen before it is.
func (s *connSettings) explain(st *status.Status, connected bool, what string) error {
	if s == nil {
		return nil
	}
	if msg := s.explainMessage(st, connected, what); msg != "" {
		return &securityError{st: st, msg: msg}
	}
	return nil
}

func (s *connSettings) explainMessage(st *status.Status, connected bool, what string) string {
	switch st.Code() {
	case codes.Unauthenticated:
		switch {
		case s.token.val == "" && s.cert.val == "":
			return fmt.Sprintf("Unauthenticated: %s; no token and no client certificate were sent: give a token with --token or $%s, "+
				"or a client certificate with --cert-file and --key-file, or use a context that has them (peloton config set-context --help)",
				st.Message(), tokenEnv)
		case s.token.val == "":
			return fmt.Sprintf("Unauthenticated: %s; %s did not accept the client certificate %s (from %s) and no token was sent: give one with --token or $%s, or use a context with a token or tokenFile",
				st.Message(), what, s.cert.val, s.cert.from, tokenEnv)
		}
		return fmt.Sprintf("Unauthenticated: %s; %s refused the token from %s: give another with --token or $%s, or fix the context's token or tokenFile",
			st.Message(), what, s.token.from, tokenEnv)
	case codes.Unavailable:
		if connected {
			return ""
		}
	default:
		return ""
	}
	reason := transportReason(st.Message())
	tlsOn := s.tls() != nil
	clientCert := s.cert.val != ""
	caHint := "give the CA that signed it with --ca-file (or use a context whose caFile holds it)"
	switch {
	case strings.Contains(reason, "certificate has expired or is not yet valid"):
		return fmt.Sprintf("%s presented a certificate that has expired or is not yet valid (%s); its operator must renew it, or this machine's clock is wrong", what, reason)
	case strings.Contains(reason, "certificate is valid for") || strings.Contains(reason, "certificate is not valid for any names") ||
		strings.Contains(reason, "doesn't contain any IP SANs"):
		return fmt.Sprintf("%s presented a certificate for another name (%s): dial it by a name its certificate carries, or give that name with --tls-server-name", what, reason)
	case strings.Contains(reason, "x509:"):
		if s.ca.val == "" {
			return fmt.Sprintf("%s presented a certificate this machine does not trust (%s); %s", what, reason, caHint)
		}
		return fmt.Sprintf("%s presented a certificate that the CA in %s (%s) did not sign (%s); %s", what, s.ca.val, s.ca.from, reason, caHint)
	case strings.Contains(reason, "first record does not look like a TLS handshake"):
		return fmt.Sprintf("%s does not serve TLS (%s); to talk to it in plaintext, leave out --ca-file, --cert-file, --key-file and --tls-server-name (and the context's)", what, reason)
	case strings.Contains(reason, "certificate required"):
		return fmt.Sprintf("%s requires a client certificate (%s): give --cert-file and --key-file, or use a context with certFile and keyFile", what, reason)
	case strings.Contains(reason, "remote error: tls:") && clientCert:
		return fmt.Sprintf("%s refused this client's certificate %s (from %s): %s; it must be signed by a CA the server trusts for clients, and valid now", what, s.cert.val, s.cert.from, reason)
	case !closedEarly(reason):
		return ""
	case !tlsOn:
		// A TLS server reads the plaintext client's first bytes as a bad
		// handshake and hangs up.
		return fmt.Sprintf("%s closed the connection before speaking plaintext gRPC (%s); if it serves TLS, %s", what, reason, caHint)
	case !clientCert:
		// Over TLS 1.3 a server checks the client's certificate after the
		// client's side of the handshake is done; the client often sees
		// only the closed connection, not the alert that says why.
		return fmt.Sprintf("%s closed the connection right after the TLS handshake (%s); if it requires a client certificate, give --cert-file and --key-file, or use a context with certFile and keyFile", what, reason)
	}
	return fmt.Sprintf("%s closed the connection right after the TLS handshake (%s); it may not accept this client's certificate %s (from %s): it must be signed by a CA the server trusts for clients, and valid now",
		what, reason, s.cert.val, s.cert.from)
}

// transportReason is the innermost reason of a connection failure, less
// grpc's wrapping: `connection error: desc = "transport: authentication
// handshake failed: tls: ..."` gives "tls: ...". The x509 error inside a
// failed verification is what users need, so from "x509:" on is kept.
func transportReason(msg string) string {
	msg = dialNoise.ReplaceAllString(msg, "$1")
	if m, ok := strings.CutPrefix(msg, `connection error: desc = "`); ok {
		msg = strings.TrimSuffix(m, `"`)
	}
	for _, p := range []string{"transport: authentication handshake failed: ", "transport: Error while dialing: ", "error reading server preface: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	if i := strings.Index(msg, "x509: "); i >= 0 {
		msg = msg[i:]
	}
	return msg
}

// closedEarly says whether a connection failure is the other side hanging
// up rather than nobody listening.
func closedEarly(reason string) bool {
	return reason == "EOF" || strings.HasSuffix(reason, ": EOF") || strings.Contains(reason, "connection reset by peer") ||
		strings.Contains(reason, "broken pipe")
}
