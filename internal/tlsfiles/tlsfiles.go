// Package tlsfiles builds the TLS configurations of Peloton's listeners and
// of its connections to other daemons from PEM files that an operator (or
// cert-manager, or a cron job running openssl) replaces while the daemon
// runs: a certificate, its key, and the CA bundles that verify the other
// side. A file is read again when its size or modification time changes or
// another file is renamed into its place (looked for at most once per
// reload.Interval, on the handshake that needs it),
// so a rotated certificate is served by the next connection without a
// restart. A replacement that does not load (a half-written file, a key that
// does not match) is logged and the previous one kept.
//
// Every configuration speaks TLS 1.2 or later.
//
// It knows crypto/tls and nothing of Peloton.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/peloton-sched/peloton/internal/reload"
)

// MinVersion is the oldest protocol version any configuration accepts.
const MinVersion = tls.VersionTLS12

// Server names the files of a listener.
type Server struct {
	// CertFile and KeyFile are the server's certificate (with its chain)
	// and private key, PEM.
	CertFile, KeyFile string
	// ClientCAFile, if set, turns on mutual TLS: every client must present
	// a certificate that one of these CAs signed.
	ClientCAFile string
}

// Enabled says whether the listener serves TLS.
func (s Server) Enabled() bool { return s.CertFile != "" || s.KeyFile != "" }

// Check says what is wrong with the set of files, naming the flag of each
// (flags[0] the certificate's, [1] the key's, [2] the client CA's), or nil.
func (s Server) Check(flags [3]string) error {
	switch {
	case s.CertFile == "" && s.KeyFile != "":
		return fmt.Errorf("%s is set but %s is not: TLS needs both", flags[1], flags[0])
	case s.CertFile != "" && s.KeyFile == "":
		return fmt.Errorf("%s is set but %s is not: TLS needs both", flags[0], flags[1])
	case s.ClientCAFile != "" && s.CertFile == "":
		return fmt.Errorf("%s needs %s and %s: clients present certificates only over TLS", flags[2], flags[0], flags[1])
	}
	if s.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile); err != nil {
			return fmt.Errorf("%s / %s: %w", flags[0], flags[1], err)
		}
	}
	if s.ClientCAFile != "" {
		if _, err := loadPool(s.ClientCAFile); err != nil {
			return fmt.Errorf("%s: %w", flags[2], err)
		}
	}
	return nil
}

// ServerConfig returns the configuration of a listener that negotiates
// nextProtos (gRPC: "h2"; HTTP: "h2", "http/1.1"). Each handshake gets the
// current certificate and client CAs. It fails if the files do not load
// now.
func ServerConfig(s Server, nextProtos []string, log *slog.Logger) (*tls.Config, error) {
	if !s.Enabled() {
		return nil, errors.New("tlsfiles: no certificate and key")
	}
	if log == nil {
		log = slog.Default()
	}
	kp, err := newKeyPair(s.CertFile, s.KeyFile, log)
	if err != nil {
		return nil, err
	}
	var cas *poolFile
	if s.ClientCAFile != "" {
		if cas, err = newPoolFile(s.ClientCAFile, log); err != nil {
			return nil, err
		}
	}
	protos := append([]string(nil), nextProtos...)
	return &tls.Config{
		MinVersion: MinVersion,
		NextProtos: protos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := &tls.Config{MinVersion: MinVersion, NextProtos: protos, Certificates: []tls.Certificate{*kp.Get()}}
			if cas != nil {
				c.ClientCAs = cas.Get()
				c.ClientAuth = tls.RequireAndVerifyClientCert
			}
			return c, nil
		},
	}, nil
}

// Client names the files of a connection to a TLS server.
type Client struct {
	// CAFile verifies the server; empty: the system's roots.
	CAFile string
	// CertFile and KeyFile, if set, are the certificate this side presents
	// (mutual TLS).
	CertFile, KeyFile string
	// ServerName, if set, is the name the server's certificate must carry
	// instead of the host of the address dialled. Dialling an IP address
	// needs it (the IP itself will do): TLS sends no IP address in its
	// server name indication, so nothing else tells the verifier which
	// address was meant, and a connection without it fails - unless
	// AnyOf says which names will do.
	ServerName string
	// AnyOf, for a connection that sends no server name (an IP address
	// dialled) and has no ServerName, are the names of which the server's
	// certificate must carry one: the addresses of every member of a
	// cluster the client may reach (etcd's endpoints), when it does not
	// say which member one connection is for.
	AnyOf []string
}

// Check says what is wrong with the set of files, naming the flag of each
// (flags[0] the CA's, [1] the certificate's, [2] the key's), or nil.
func (c Client) Check(flags [3]string) error {
	switch {
	case c.CertFile == "" && c.KeyFile != "":
		return fmt.Errorf("%s is set but %s is not: a client certificate needs both", flags[2], flags[1])
	case c.CertFile != "" && c.KeyFile == "":
		return fmt.Errorf("%s is set but %s is not: a client certificate needs both", flags[1], flags[2])
	}
	if c.CAFile != "" {
		if _, err := loadPool(c.CAFile); err != nil {
			return fmt.Errorf("%s: %w", flags[0], err)
		}
	}
	if c.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
			return fmt.Errorf("%s / %s: %w", flags[1], flags[2], err)
		}
	}
	return nil
}

// ClientConfig returns the configuration of a connection that verifies the
// server against the current CA bundle and presents the current client
// certificate, if any. It fails if the files do not load now.
func ClientConfig(c Client, log *slog.Logger) (*tls.Config, error) {
	if log == nil {
		log = slog.Default()
	}
	cfg := &tls.Config{MinVersion: MinVersion, ServerName: c.ServerName}
	if c.CertFile != "" || c.KeyFile != "" {
		kp, err := newKeyPair(c.CertFile, c.KeyFile, log)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.Get(), nil }
	}
	if c.CAFile == "" {
		return cfg, nil // the system's roots, verified by crypto/tls
	}
	cas, err := newPoolFile(c.CAFile, log)
	if err != nil {
		return nil, err
	}
	// crypto/tls verifies against a fixed RootCAs; to follow a rotated
	// bundle the chain is verified here, against the bundle of the moment,
	// exactly as crypto/tls would (name, validity, key usage).
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the server presented no certificate")
		}
		// The name to verify: the configured one, else the one sent as
		// SNI - the host dialled, which the caller (gRPC) put in its own
		// copy of this configuration. SNI is empty when an IP address was
		// dialled; verifying without a name would take any certificate
		// the CA signed (a client's, say) for the server's.
		name := c.ServerName
		if name == "" {
			name = cs.ServerName
		}
		if name == "" && len(c.AnyOf) == 0 {
			return errors.New("tls: no server name to verify the server's certificate against: an IP address dialled needs the server name set (the address itself will do)")
		}
		inter := x509.NewCertPool()
		for _, ic := range cs.PeerCertificates[1:] {
			inter.AddCert(ic)
		}
		leaf := cs.PeerCertificates[0]
		_, err := leaf.Verify(x509.VerifyOptions{
			Roots: cas.Get(), Intermediates: inter, DNSName: name,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			return fmt.Errorf("tls: verifying the server's certificate against %s: %w", c.CAFile, err)
		}
		if name != "" {
			return nil
		}
		for _, n := range c.AnyOf {
			if leaf.VerifyHostname(n) == nil {
				return nil
			}
		}
		return fmt.Errorf("tls: the server's certificate is valid for %s, none of %s", certNames(leaf), strings.Join(c.AnyOf, ", "))
	}
	return cfg, nil
}

// certNames lists the names a certificate is valid for.
func certNames(c *x509.Certificate) string {
	names := append([]string(nil), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no name"
	}
	return strings.Join(names, ", ")
}

type keyPair = reload.File[*tls.Certificate]

func newKeyPair(certFile, keyFile string, log *slog.Logger) (*keyPair, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tlsfiles: a certificate needs both its file and its key's")
	}
	return reload.New([]string{certFile, keyFile}, func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		return &c, nil
	}, log)
}

type poolFile = reload.File[*x509.CertPool]

func newPoolFile(path string, log *slog.Logger) (*poolFile, error) {
	return reload.New([]string{path}, func() (*x509.CertPool, error) { return loadPool(path) }, log)
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return p, nil
}
