package cli

import (
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/peloton-sched/peloton/hostmgr/local"
	"github.com/peloton-sched/peloton/internal/etcdtls"
	"github.com/peloton-sched/peloton/internal/tlsfiles"
)

// geteuid is os.Geteuid; tests pretend to be root, or not.
var geteuid = os.Geteuid

// isolationFlags are the flags that keep tasks away from Peloton: who the
// local backend runs them as.
type isolationFlags struct {
	taskUser string
}

func (f *isolationFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.taskUser, "task-user", "", "run every task of the local backend, and its health check, as this user (a name or a numeric uid), in a sandbox only it may enter; needs peloton to run as root. Without it tasks run as peloton's own user: as root, they can read every file of the machine")
}

// config checks --task-user for the backend and returns the user
// (cluster.Config.TaskUser; "": none).
func (f *isolationFlags) config(backend string) (string, error) {
	name := strings.TrimSpace(f.taskUser)
	if name == "" {
		return "", nil
	}
	if backend != local.BackendName {
		return "", usageErrorf("invalid --task-user: only the local backend runs tasks as processes of this machine (--backend %s)", backend)
	}
	if _, err := local.LookupTaskUser(name); err != nil {
		return "", usageErrorf("invalid --task-user %s: %v", name, err)
	}
	if euid := geteuid(); euid != 0 {
		return "", usageErrorf("invalid --task-user %s: peloton runs as uid %d, not root, and cannot switch tasks to another user (its tasks run as uid %d)", name, euid, euid)
	}
	return name, nil
}

// checkEtcdListen checks --etcd-listen, the embedded etcd's opt-in TCP
// listener: a loopback host:port, since etcd asks no credentials.
func checkEtcdListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageErrorf("invalid --etcd-listen %q: want host:port", addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return usageErrorf("invalid --etcd-listen %s: not a loopback address; the embedded etcd asks no credentials, so it may listen on TCP only on this machine (127.0.0.1)", addr)
	}
	return nil
}

// etcdTLSFlags are the files of the TLS of a daemon's etcd clients, named
// as etcdctl names them (--cacert, --cert, --key).
type etcdTLSFlags struct {
	files tlsfiles.Client
}

// etcdTLSFlagNames are the flags' names, in the order tlsfiles.Client.Check
// takes them.
var etcdTLSFlagNames = [3]string{"--etcd-cacert", "--etcd-cert", "--etcd-key"}

func (f *etcdTLSFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.files.CAFile, "etcd-cacert", "", "CA bundle (PEM) that verifies the external etcd's certificate (default: the system's roots); read again when replaced")
	fs.StringVar(&f.files.CertFile, "etcd-cert", "", "client certificate (PEM) to present to the external etcd (with --etcd-key); read again when replaced")
	fs.StringVar(&f.files.KeyFile, "etcd-key", "", "private key (PEM) of --etcd-cert")
}

// config checks the files against the endpoints of the external etcd
// (none: the embedded etcd, which takes no TLS) and returns them.
func (f *etcdTLSFlags) config(endpoints []string) (tlsfiles.Client, error) {
	if !etcdtls.Enabled(f.files) {
		return tlsfiles.Client{}, nil
	}
	given := etcdTLSFlagNames[0]
	switch {
	case f.files.CAFile != "":
	case f.files.CertFile != "":
		given = etcdTLSFlagNames[1]
	default:
		given = etcdTLSFlagNames[2]
	}
	if len(endpoints) == 0 {
		return tlsfiles.Client{}, usageErrorf("invalid %s: it is for an external etcd (--etcd-endpoints); the embedded etcd answers on a unix socket only peloton's user can open", given)
	}
	for _, ep := range endpoints {
		if u, err := url.Parse(ep); err == nil && u.Scheme == "http" {
			return tlsfiles.Client{}, usageErrorf("invalid --etcd-endpoints %s: plain http, while %s asks for TLS; use https://", ep, given)
		}
	}
	if err := f.files.Check(etcdTLSFlagNames); err != nil {
		return tlsfiles.Client{}, usageErrorf("%v", err)
	}
	return f.files, nil
}
