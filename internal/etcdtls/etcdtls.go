// Package etcdtls builds the TLS configuration of a daemon's etcd clients
// (its store, its leader election) from the files that --etcd-cacert,
// --etcd-cert and --etcd-key name, with internal/tlsfiles, so that files
// replaced while the daemon runs are used by its next connections.
//
// It adds one check to tlsfiles' verification of the server: that the
// server's certificate is valid for the address dialled when that address
// is an IP. crypto/tls sends no server name for an IP address, and the
// tlsfiles verifier checks the name the connection reports, which is then
// empty: any certificate the CA signed would pass for any member. etcd
// clusters are often reached by IP. It imports only internal/tlsfiles.
package etcdtls

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"

	"github.com/peloton-sched/peloton/internal/tlsfiles"
)

// Enabled says whether files name any file: with none, the clients dial
// as the endpoints' schemes say (an https:// endpoint is verified against
// the system's roots).
func Enabled(files tlsfiles.Client) bool {
	return files.CAFile != "" || files.CertFile != "" || files.KeyFile != ""
}

// Config returns the TLS configuration of clients of the etcd cluster at
// endpoints, or nil when files name nothing. It fails if the files do not
// load now.
func Config(files tlsfiles.Client, endpoints []string, log *slog.Logger) (*tls.Config, error) {
	if !Enabled(files) {
		return nil, nil
	}
	cfg, err := tlsfiles.ClientConfig(files, log)
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	verify := cfg.VerifyConnection
	ips := ipHosts(endpoints)
	if verify == nil || len(ips) == 0 || files.ServerName != "" {
		// crypto/tls verifies (system roots: the name is the address
		// dialled, IPs included), or no endpoint is an IP, or the name
		// to check is given.
		return cfg, nil
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if err := verify(cs); err != nil {
			return err
		}
		if cs.ServerName != "" || len(cs.PeerCertificates) == 0 {
			return nil // a DNS name, which verify checked
		}
		// The connection does not say which endpoint it is: the
		// certificate must be valid for one of them. All are members of
		// the one etcd cluster.
		leaf := cs.PeerCertificates[0]
		for _, ip := range ips {
			if leaf.VerifyHostname(ip) == nil {
				return nil
			}
		}
		return fmt.Errorf("tls: the etcd server's certificate is valid for %s, none of the endpoints' addresses (%s)",
			certNames(leaf.DNSNames, leaf.IPAddresses), strings.Join(ips, ", "))
	}
	return cfg, nil
}

// ipHosts lists the endpoints' hosts that are IP addresses.
func ipHosts(endpoints []string) []string {
	var out []string
	for _, ep := range endpoints {
		host := ep
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			host = u.Host
		}
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if net.ParseIP(host) != nil {
			out = append(out, host)
		}
	}
	return out
}

func certNames(dns []string, ips []net.IP) string {
	names := append([]string(nil), dns...)
	for _, ip := range ips {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no name"
	}
	return strings.Join(names, ", ")
}
