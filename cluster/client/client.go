// Package client is the one way Go code talks to Peloton's public APIs:
// a cluster's (Client) and the federation's (Federation). The CLI, the
// benchmarks, the end-to-end tests and the federation's own reconcilers all
// build their connections here, so dial options, per-call deadlines,
// message limits and transport security are decided in one place for both.
//
// A Client is one gRPC connection to one cluster with a client for each
// service over it; a Federation is one connection to the federation with a
// client for each of its services (clusters, global pools, federated jobs).
// Both are safe for concurrent use; Close them when done. New and
// NewFederation do not connect: the first call does, and fails fast (calls
// are not wait-for-ready) when nothing listens, so a missing server never
// blocks a caller beyond its deadline.
//
// Creates (CreateJob, CreatePool, CreateUpdate, and the federation's
// CreateFederatedPool and CreateFederatedJob) take a request id that makes
// them safe to retry; NewRequestID makes one. Use the same id for every
// retry of one intended create, and a fresh one for the next.
//
// This package must import no Peloton package but the API protos,
// internal/tlsfiles (TLS from files, reloaded) and internal/reload (the
// token file, reloaded): it is what a program outside the cluster links,
// the slim host agent included.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peloton-sched/peloton/internal/reload"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Options configures a Client or a Federation. The zero value is a
// plaintext connection whose unary calls have no deadline of their own.
type Options struct {
	// Timeout bounds every unary call: a call whose context has no earlier
	// deadline gets this one. 0 adds none. Streams (task logs) are not
	// bounded, since following a log lasts as long as the caller wants.
	Timeout time.Duration
	// TransportCredentials secures the connection (e.g.
	// credentials.NewTLS(cfg)). nil: plaintext, which is what a cluster
	// serves today.
	TransportCredentials credentials.TransportCredentials
	// MaxMsgBytes, if > 0, is the largest message sent or received, for
	// callers that read very large answers (ListTasks of a huge job).
	// 0 keeps gRPC's defaults.
	MaxMsgBytes int
	// TLS, if set (and TransportCredentials is not), secures the
	// connection with these files, read again when they change.
	TLS *TLSFiles
	// Token, if set, is sent as a bearer token with every call. It is sent
	// only over TLS or to a loopback address: New refuses otherwise (an
	// error that wraps ErrPlaintextToken).
	Token string
	// TokenFile, if set (and Token is not), holds the token (see
	// ReadTokenFile). It is read now, and again by the first call after it
	// changes, so a daemon picks up a rotated token without a restart. The
	// same transport rule as Token's holds.
	TokenFile string
	// DialOptions are added after the ones Options implies.
	DialOptions []grpc.DialOption
}

// TLSFiles are the PEM files of a TLS connection to Peloton.
type TLSFiles struct {
	// CAFile verifies the server's certificate; empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are this client's certificate and key, for a
	// server that requires client certificates (mutual TLS).
	CertFile, KeyFile string
	// ServerName, if set, is the name the server's certificate must carry
	// instead of the host of the address dialled.
	ServerName string
}

// Check says what is wrong with the files: a certificate without its key
// or the other way round, a file that does not load. Each is named by
// flags: [0] the CA file's name, [1] the certificate's, [2] the key's (the
// flag or config field a user set it with). nil if New would load them.
func (f TLSFiles) Check(flags [3]string) error { return f.files().Check(flags) }

func (f TLSFiles) files() tlsfiles.Client {
	return tlsfiles.Client{CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile, ServerName: f.ServerName}
}

// Client is a connection to one cluster's API with a client per service.
type Client struct {
	// Addr is the address the client dials (host:port or a gRPC target).
	Addr string
	// Conn is the connection every service client uses.
	Conn *grpc.ClientConn

	Jobs    pelotonv1.JobServiceClient
	Tasks   pelotonv1.TaskServiceClient
	Pools   pelotonv1.PoolServiceClient
	Hosts   pelotonv1.HostServiceClient
	Updates pelotonv1.UpdateServiceClient
	// Partitions shows partitions and moves, and takes the advisor's advice.
	Partitions pelotonv1.PartitionServiceClient
}

// New prepares a client of the cluster API at addr. It fails only on a
// malformed address or options; an unreachable server shows on the first
// call.
func New(addr string, o Options) (*Client, error) {
	conn, err := dial(addr, o)
	if err != nil {
		return nil, err
	}
	return &Client{
		Addr:       addr,
		Conn:       conn,
		Jobs:       pelotonv1.NewJobServiceClient(conn),
		Tasks:      pelotonv1.NewTaskServiceClient(conn),
		Pools:      pelotonv1.NewPoolServiceClient(conn),
		Hosts:      pelotonv1.NewHostServiceClient(conn),
		Updates:    pelotonv1.NewUpdateServiceClient(conn),
		Partitions: pelotonv1.NewPartitionServiceClient(conn),
	}, nil
}

// dial opens the connection behind a Client or a Federation, with the
// dial options o implies (then o.DialOptions). It fails only on a malformed
// address or options; it does not connect.
func dial(addr string, o Options) (*grpc.ClientConn, error) {
	if o.Timeout < 0 {
		return nil, fmt.Errorf("client: timeout %s: must be >= 0", o.Timeout)
	}
	creds := o.TransportCredentials
	if creds == nil && o.TLS != nil {
		files := o.TLS.files()
		if h := targetHost(addr); files.ServerName == "" && net.ParseIP(h) != nil {
			// The certificate must name the address dialled, which
			// tlsfiles cannot learn from the handshake (a name it can).
			files.ServerName = h
		}
		cfg, err := tlsfiles.ClientConfig(files, nil)
		if err != nil {
			return nil, fmt.Errorf("client: TLS: %w", err)
		}
		creds = credentials.NewTLS(cfg)
	}
	secure := creds != nil
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.Token != "" || o.TokenFile != "" {
		if !secure && !loopback(addr) {
			return nil, fmt.Errorf("client: %w, and %s is neither (give a CA file)", ErrPlaintextToken, addr)
		}
		b := bearer{token: o.Token, secure: secure}
		if o.Token == "" {
			f, err := reload.New([]string{o.TokenFile}, func() (string, error) { return ReadTokenFile(o.TokenFile) }, nil)
			if err != nil {
				return nil, fmt.Errorf("client: token file: %w", err)
			}
			b.file = f
		}
		opts = append(opts, grpc.WithPerRPCCredentials(b))
	}
	if o.Timeout > 0 {
		opts = append(opts, grpc.WithChainUnaryInterceptor(deadline(o.Timeout)))
	}
	if o.MaxMsgBytes > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxMsgBytes), grpc.MaxCallSendMsgSize(o.MaxMsgBytes)))
	}
	opts = append(opts, o.DialOptions...)
	return grpc.NewClient(addr, opts...)
}

// deadline bounds each unary call by d. context.WithTimeout keeps an earlier
// deadline the caller already set.
func deadline(d time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// ErrPlaintextToken is why New refuses a token to an address that is
// neither reached over TLS nor a loopback one: anyone on the path would
// read it.
var ErrPlaintextToken = errors.New("a token is sent only over TLS or to a loopback address")

// ReadTokenFile reads a token from a file: its content less surrounding
// white space (the newline an editor or echo adds). An empty file is an
// error, not a call without a token.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return tok, nil
}

// bearer sends a token with every call: token, or what file holds now.
type bearer struct {
	token  string
	file   *reload.File[string]
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok := b.token
	if b.file != nil {
		// A token file that stops loading keeps the last good token: the
		// server says Unauthenticated if that one expired.
		tok = b.file.Get()
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity is false only for the loopback case dial allowed.
func (b bearer) RequireTransportSecurity() bool { return b.secure }

// targetHost is the host a gRPC target names.
func targetHost(target string) string {
	target = strings.TrimPrefix(target, "passthrough:///")
	target = strings.TrimPrefix(target, "dns:///")
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	return host
}

// loopback says whether a gRPC target names a loopback address.
func loopback(target string) bool {
	host := targetHost(target)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Connected reports whether the connection is up now. After a failed call
// it tells "the server could not be reached" from "the server answered
// with this error".
func (c *Client) Connected() bool { return c.Conn.GetState() == connectivity.Ready }

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error { return c.Conn.Close() }

// NewRequestID returns a fresh random request id for one intended create
// (128 random bits, hex), valid for every create request's request_id.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go >= 1.24)
	return hex.EncodeToString(b[:])
}
