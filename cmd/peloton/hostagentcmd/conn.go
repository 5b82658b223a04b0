package hostagentcmd

import (
	"errors"

	"github.com/spf13/pflag"

	pclient "github.com/peloton-sched/peloton/cluster/client"
	"github.com/peloton-sched/peloton/cmd/peloton/internal/cmdutil"
)

// ConnFlags are the flags of a daemon's connection to the cluster stack
// as its client: the host agent's and `serve advisor`'s. They take the
// token from a file rather than the command line, where every user of the
// machine could read it in the process list, and read it again when it
// changes, as they do the TLS files.
type ConnFlags struct {
	caFile, certFile, keyFile, serverName, tokenFile string
}

// Register adds the flags to fs.
func (c *ConnFlags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&c.caFile, "ca-file", "", "PEM file of the CA that signed the stack's certificate; connects over TLS (as do --cert-file and --tls-server-name)")
	fs.StringVar(&c.certFile, "cert-file", "", "PEM certificate to present to a stack that requires client certificates (mutual TLS), with --key-file")
	fs.StringVar(&c.keyFile, "key-file", "", "PEM private key of --cert-file")
	fs.StringVar(&c.serverName, "tls-server-name", "", "name the stack's certificate must carry, if not the host of --server")
	fs.StringVar(&c.tokenFile, "token-file", "", "file that holds the bearer token sent with every call (read again when it changes); only over TLS or to a loopback --server")
}

// Options checks the flags and returns the client options they give:
// files that do not load are usage errors naming their flag. Whether the
// token may go to the server in plaintext is New's to say (see DialError).
func (c *ConnFlags) Options() (pclient.Options, error) {
	var o pclient.Options
	f := pclient.TLSFiles{CAFile: c.caFile, CertFile: c.certFile, KeyFile: c.keyFile, ServerName: c.serverName}
	if f != (pclient.TLSFiles{}) {
		if err := f.Check([3]string{"--ca-file", "--cert-file", "--key-file"}); err != nil {
			return o, cmdutil.Usagef("%v", err)
		}
		o.TLS = &f
	}
	if c.tokenFile != "" {
		if _, err := pclient.ReadTokenFile(c.tokenFile); err != nil {
			return o, cmdutil.Usagef("invalid --token-file: %v", err)
		}
		o.TokenFile = c.tokenFile
	}
	return o, nil
}

// DialError is the usage error of a connection to server that could not be
// made with options from ConnFlags.
func DialError(server string, err error) error {
	if errors.Is(err, pclient.ErrPlaintextToken) {
		return cmdutil.Usagef("--token-file: the token is sent only over TLS or to a loopback address, and --server %s is neither: give --ca-file", server)
	}
	return cmdutil.Usagef("invalid --server %q: %v", server, err)
}
