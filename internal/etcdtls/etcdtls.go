// Package etcdtls builds the TLS configuration of a daemon's etcd clients
// (its store, its leader election) from the files that --etcd-cacert,
// --etcd-cert and --etcd-key name, with internal/tlsfiles, so that files
// replaced while the daemon runs are used by its next connections.
//
// etcd clusters are often reached by IP, for which crypto/tls sends no
// server name: the server's certificate must then be valid for one of the
// endpoints' IP addresses (tlsfiles.Client.AnyOf). It imports only
// internal/tlsfiles.
package etcdtls

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"

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
	if files.ServerName == "" {
		// crypto/tls sends no server name for an IP address: the
		// certificate must then be valid for one of the endpoints' IPs
		// (all members of the one etcd cluster).
		files.AnyOf = ipHosts(endpoints)
	}
	cfg, err := tlsfiles.ClientConfig(files, log)
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
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
