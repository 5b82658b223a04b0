package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The embedded server answers its clients on a unix socket in its data
// directory, and on TCP only when asked (EmbeddedConfig.ClientAddr). It has
// no authentication: whoever can connect can read and rewrite all of
// Peloton's state. A TCP port on loopback is open to every process of the
// machine, the tasks of the local backend included; the socket is open only
// to those that may enter the data directory, which StartEmbedded makes
// this process's user's alone (0700; the socket itself is 0600). It has no
// peer listener at all: a single member dials no peer, and a raft port
// would let anyone on the machine send it raft messages.

// Defaults for EmbeddedConfig.
const (
	// EmbeddedSocket is the name of the unix socket, in the data
	// directory, that clients of an embedded server connect to.
	EmbeddedSocket = "client.sock"
	// DefaultEmbeddedMaxTxnOps is far above etcd's 128 because Peloton writes
	// whole jobs (one key per instance) and group-commit batches atomically.
	DefaultEmbeddedMaxTxnOps = 10000
	// DefaultEmbeddedQuotaBackendBytes is etcd's recommended maximum; the
	// 2 GiB etcd default is too small for task runtimes of large clusters.
	DefaultEmbeddedQuotaBackendBytes = 8 << 30
)

// embeddedStartTimeout bounds the wait for the server to elect itself and
// serve. A single member on a healthy disk takes well under a second; a
// minute means a disk or data-dir problem worth reporting, not waiting out.
const embeddedStartTimeout = 60 * time.Second

// Auto-compaction. Revision mode, because it bounds the history etcd keeps by
// the number of writes rather than by wall time: Peloton's write rate scales
// with cluster activity (a burst of task state changes can be tens of
// thousands of txns a minute), and periodic "1h" would then keep an hour of
// every superseded task runtime, which is what fills the backend quota. With
// revision mode, space beyond live data stays bounded at roughly 10000 txns
// plus what is written between compaction runs (etcd checks every 5 minutes).
// The price is that watchers resuming from an old revision may get
// ErrCompacted sooner under heavy load; they must re-List then, which they
// have to handle anyway.
const autoCompactionRetention = "10000"

// dataDirLockName is the file in DataDir that StartEmbedded locks for as long
// as the server runs.
const dataDirLockName = "peloton-embedded.lock"

// pickAttempts is how often StartEmbedded retries when a port it picked itself
// was taken by someone else between picking and binding.
const pickAttempts = 5

// maxSocketPath is the longest path a unix socket may have on Linux: 108
// bytes of sun_path, one of them the terminating NUL.
const maxSocketPath = 107

// embeddedPeerURL is the peer URL the member advertises. Nothing listens
// on it and nothing dials it: a single-member cluster has no peer to
// reach, but etcd names every member by its peer URLs.
const embeddedPeerURL = "unix://peloton-embedded-no-peer-listener"

// EmbeddedConfig configures an etcd server run inside the Peloton process, for
// single-node installs, development and tests, where running a separate etcd
// cluster is not worth it.
type EmbeddedConfig struct {
	// DataDir holds the WAL and database, and the clients' socket
	// (EmbeddedSocket); required. Reusing it keeps the data. It is made
	// private to this process's user (0700), and refused if another user
	// owns it.
	DataDir string
	// ClientAddr, if set, is a loopback host:port where the server also
	// answers clients over TCP, for tools that cannot use the socket; every
	// process of the machine can reach it. Port 0 picks a free port;
	// Endpoints reports the real one.
	ClientAddr string
	// MaxTxnOps is etcd's --max-txn-ops (default DefaultEmbeddedMaxTxnOps).
	MaxTxnOps uint
	// QuotaBackendBytes is etcd's --quota-backend-bytes (default 8 GiB).
	QuotaBackendBytes int64
	// Logger receives etcd's own log (errors only, unless Verbose) and the
	// embedded server's lifecycle events (default slog.Default()).
	Logger *slog.Logger
	// Verbose raises etcd's logging from error to info, for debugging.
	Verbose bool
}

// Embedded is a running single-member etcd server.
type Embedded struct {
	etcd      *embed.Etcd
	endpoint  string // the socket's URL
	tcp       string // the TCP URL, or ""
	maxTxnOps int
	log       *slog.Logger
	errDone   chan struct{} // closed when the e.Err() drain goroutine exits
	closing   atomic.Bool   // set before stopping etcd, to drop its shutdown noise
	lock      *fileutil.LockedFile

	closeOnce sync.Once
}

// StartEmbedded starts etcd on cfg.DataDir and returns once it serves
// requests. It fails, rather than hangs, if an address is in use, the data dir
// is unusable, or the server is not ready within a minute.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("store: embedded etcd: dataDir: must not be empty")
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("store: embedded etcd: dataDir: %w", err)
	}
	cfg.DataDir = dir
	if sock := filepath.Join(dir, EmbeddedSocket); len(sock) > maxSocketPath {
		return nil, fmt.Errorf("store: embedded etcd: dataDir: the clients' socket %s would be %d bytes long, and a unix socket's path may have at most %d: use a shorter data directory",
			sock, len(sock), maxSocketPath)
	}
	if cfg.MaxTxnOps == 0 {
		cfg.MaxTxnOps = DefaultEmbeddedMaxTxnOps
	}
	if cfg.QuotaBackendBytes == 0 {
		cfg.QuotaBackendBytes = DefaultEmbeddedQuotaBackendBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ClientAddr != "" {
		if err := checkAddr("clientAddr", cfg.ClientAddr); err != nil {
			return nil, err
		}
	}
	if err := privateDir(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("store: embedded etcd: dataDir: %w", err)
	}

	// etcd opens its database with an unbounded wait for bbolt's file lock,
	// so a second server on a data dir in use would hang in StartEtcd (before
	// any timeout of ours could apply). Fail fast on our own lock instead.
	lockPath := filepath.Join(cfg.DataDir, dataDirLockName)
	lock, err := fileutil.TryLockFile(lockPath, os.O_WRONLY|os.O_CREATE, 0o600)
	if errors.Is(err, fileutil.ErrLocked) {
		return nil, fmt.Errorf("store: embedded etcd: dataDir %s is in use by another embedded etcd (lock %s)", cfg.DataDir, lockPath)
	}
	if err != nil {
		return nil, fmt.Errorf("store: embedded etcd: dataDir: lock: %w", err)
	}

	// Port 0 must be resolved before etcd sees it: etcd would bind a random
	// port but keep advertising ":0" to clients and in cluster membership.
	// A port we pick can be taken before etcd binds it; only then retry.
	var lastErr error
	for range pickAttempts {
		clientAddr, clientPicked := "", false
		if cfg.ClientAddr != "" {
			if clientAddr, clientPicked, err = pickPort("clientAddr", cfg.ClientAddr); err != nil {
				_ = lock.Close()
				return nil, err
			}
		}
		e, err := startEmbedded(cfg, clientAddr)
		if err == nil {
			e.lock = lock
			return e, nil
		}
		lastErr = err
		var inUse *addrInUseError
		if !errors.As(err, &inUse) || inUse.addr != clientAddr || !clientPicked {
			break
		}
	}
	_ = lock.Close()
	return nil, lastErr
}

// addrInUseError names the field whose address is taken, which etcd's bare
// "bind: address already in use" does not.
type addrInUseError struct {
	field, addr string
	err         error
}

func (e *addrInUseError) Error() string {
	return fmt.Sprintf("store: embedded etcd: %s %s already in use (another etcd or Peloton on this host?): %v", e.field, e.addr, e.err)
}

func (e *addrInUseError) Unwrap() error { return e.err }

// privateDir makes dir, or takes it if it exists, as a directory only this
// process's user may enter: the socket in it is the server's only door.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to this process's uid %d: its owner could reach the etcd socket in it", dir, st.Uid, os.Geteuid())
	}
	return os.Chmod(dir, 0o700)
}

func startEmbedded(cfg EmbeddedConfig, clientAddr string) (*Embedded, error) {
	sock := filepath.Join(cfg.DataDir, EmbeddedSocket)
	socketURL := url.URL{Scheme: "unix", Path: sock}
	clientURLs := []url.URL{socketURL}
	var tcpURL string
	if clientAddr != "" {
		u := url.URL{Scheme: "http", Host: clientAddr}
		clientURLs, tcpURL = append(clientURLs, u), u.String()
	}
	peerURL, err := url.Parse(embeddedPeerURL)
	if err != nil {
		return nil, err
	}

	ec := embed.NewConfig()
	ec.Name = "peloton"
	ec.Dir = cfg.DataDir
	ec.ListenClientUrls = clientURLs
	ec.AdvertiseClientUrls = clientURLs
	ec.ListenPeerUrls = nil
	ec.AdvertisePeerUrls = []url.URL{*peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.InitialClusterToken = "peloton"
	ec.MaxTxnOps = cfg.MaxTxnOps
	ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	ec.AutoCompactionMode = embed.CompactorModeRevision
	ec.AutoCompactionRetention = autoCompactionRetention
	ec.LogLevel = "error"
	floor := zapcore.ErrorLevel
	if cfg.Verbose {
		ec.LogLevel = "info"
		floor = zapcore.InfoLevel
	}
	m := &Embedded{
		endpoint:  socketURL.String(),
		tcp:       tcpURL,
		maxTxnOps: int(cfg.MaxTxnOps),
		log:       cfg.Logger,
		errDone:   make(chan struct{}),
	}
	core := newSlogCore(cfg.Logger.Handler(), floor)
	// On Close, etcd logs every listener's "server closed" as an error
	// ("setting up serving from embedded etcd failed."); that is shutdown,
	// not a failure, and would teach operators to ignore etcd errors.
	core.drop = func(e zapcore.Entry) bool {
		return m.closing.Load() && e.Message == "setting up serving from embedded etcd failed."
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(core).With(zap.String("component", "etcd")))

	e, err := embed.StartEtcd(ec)
	if err != nil {
		var oe *net.OpError
		if errors.Is(err, syscall.EADDRINUSE) && errors.As(err, &oe) && oe.Addr != nil && oe.Addr.String() == clientAddr {
			return nil, &addrInUseError{field: "clientAddr", addr: clientAddr, err: err}
		}
		return nil, fmt.Errorf("store: embedded etcd: start in %s: %w", cfg.DataDir, err)
	}

	timer := time.NewTimer(embeddedStartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		m.closing.Store(true)
		e.Close()
		if err == nil {
			err = errors.New("server stopped")
		}
		return nil, fmt.Errorf("store: embedded etcd: failed while starting in %s: %w", cfg.DataDir, err)
	case <-timer.C:
		m.closing.Store(true)
		e.Close()
		return nil, fmt.Errorf("store: embedded etcd: not ready after %v (data dir %s): check the disk and etcd's log", embeddedStartTimeout, cfg.DataDir)
	}

	m.etcd = e
	// etcd made the socket with this process's umask; the directory
	// already keeps others out, this keeps them out should it be opened.
	if err := os.Chmod(sock, 0o600); err != nil {
		m.closing.Store(true)
		e.Close()
		return nil, fmt.Errorf("store: embedded etcd: make the socket %s private: %w", sock, err)
	}
	log := cfg.Logger
	// etcd reports serving failures (e.g. a listener dying) on Err() until it
	// closes the channel on shutdown; nobody else would see them.
	go func() {
		defer close(m.errDone)
		for err := range e.Err() {
			if err != nil {
				log.Error("embedded etcd failed", "err", err)
			}
		}
	}()
	log.Info("embedded etcd started", "endpoints", m.Endpoints(), "dataDir", cfg.DataDir)
	return m, nil
}

// checkAddr wants host:port with a loopback IP (or localhost) host, as etcd
// binds it: the server has no authentication, so it must not answer other
// machines.
func checkAddr(field, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("store: embedded etcd: %s: %w", field, err)
	}
	ip := net.ParseIP(host)
	if ip == nil && host != "localhost" {
		return fmt.Errorf("store: embedded etcd: %s: %q is not an IP address", field, host)
	}
	if ip != nil && !ip.IsLoopback() {
		return fmt.Errorf("store: embedded etcd: %s: %s is not a loopback address, and the embedded etcd has no authentication", field, host)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("store: embedded etcd: %s: bad port %q", field, port)
	}
	return nil
}

// pickPort replaces port 0 in a checked addr with a free port.
func pickPort(field, addr string) (resolved string, picked bool, err error) {
	host, port, _ := net.SplitHostPort(addr)
	if port != "0" {
		return addr, false, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", false, fmt.Errorf("store: embedded etcd: %s: pick a free port: %w", field, err)
	}
	resolved = l.Addr().String()
	_ = l.Close()
	return resolved, true, nil
}

// Endpoints returns the client URLs to give clientv3 or EtcdConfig: the
// socket's (unix:///<DataDir>/client.sock), then the TCP one if there is
// one.
func (m *Embedded) Endpoints() []string {
	if m.tcp == "" {
		return []string{m.endpoint}
	}
	return []string{m.endpoint, m.tcp}
}

// TCPEndpoint is the URL of the TCP listener that ClientAddr asked for,
// or "": for clients that cannot use a unix socket (another program).
func (m *Embedded) TCPEndpoint() string { return m.tcp }

// SocketPath is the path of the clients' socket.
func (m *Embedded) SocketPath() string { return strings.TrimPrefix(m.endpoint, "unix://") }

// MaxTxnOps returns the server's --max-txn-ops, to pass on to
// EtcdConfig.MaxTxnOps so stores use the whole allowance.
func (m *Embedded) MaxTxnOps() int { return m.maxTxnOps }

// Client returns a new client connected to this server; the caller closes it.
// ctx bounds only the connection check, not the client's life.
func (m *Embedded) Client(ctx context.Context) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{m.endpoint},
		DialTimeout: DefaultDialTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("store: embedded etcd: client: %w", err)
	}
	if _, err := cli.Status(ctx, m.endpoint); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("store: embedded etcd: client: %w", err)
	}
	return cli, nil
}

// InProcessClient returns a new client that calls this server's gRPC
// service implementations directly: no socket, no HTTP/2 framing, no
// encoding of requests and answers, which on the write path of a busy
// stack costs as much CPU as etcd's own bookkeeping. Its requests go
// through the same quota, raft and apply steps as any client's. The caller
// closes it; it stops working when the server stops.
func (m *Embedded) InProcessClient() *clientv3.Client {
	return v3client.New(m.etcd.Server)
}

// Defragment defragments the server's database: the file shrinks to the
// data it holds. It blocks the server's reads and writes while it runs
// (about a second per GiB). The in-process client cannot ask for it: the
// server's maintenance service, as v3client builds it, has no health
// notifier and panics on it.
func (m *Embedded) Defragment(context.Context) error {
	return m.etcd.Server.Defragment()
}

// Close stops the server and waits until its files are closed, so the data
// dir can be reopened right away. Calling it again is a no-op.
func (m *Embedded) Close() error {
	m.closeOnce.Do(func() {
		m.closing.Store(true)
		m.etcd.Close()
		<-m.errDone
		_ = m.lock.Close() // after etcd closed its files
		m.log.Info("embedded etcd stopped", "endpoints", m.Endpoints())
	})
	return nil
}
