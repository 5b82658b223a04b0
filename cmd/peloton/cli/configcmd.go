package cli

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/peloton-sched/peloton/cluster"
)

// configCommand is `peloton config`: the config file's contexts.
func (a *app) configCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show and edit the contexts of the config file: named clusters and how to reach them",
		Long: `Show and edit the config file: named contexts, each a cluster stack (server),
a federation, a default --cluster, the TLS files and the token that reach them.
The context in use is --context, else the file's currentContext; its values
are the defaults of --server, --federation, --cluster, --ca-file, --cert-file,
--key-file, --tls-server-name and --token. A flag given, or $PELOTON_SERVER,
$PELOTON_FEDERATION or $PELOTON_TOKEN when set, wins over the context.

The file is --config, else $PELOTON_CONFIG, else peloton/config.yaml under
$XDG_CONFIG_HOME or ~/.config. docs/cli-config.md describes its format. The
commands here write it whole (comments are not kept), as one rename, readable
by its owner only.`,
	}
	a.group(cmd)
	cmd.AddCommand(
		a.configViewCommand(),
		a.configGetContextsCommand(),
		a.configUseContextCommand(),
		a.configSetContextCommand(),
		a.configDeleteContextCommand(),
	)
	return cmd
}

// readConfig loads the config file these commands show or edit.
func (a *app) readConfig() (cfg *configFile, path string, exists bool, err error) {
	path, err = a.configPath()
	if err != nil {
		return nil, "", false, err
	}
	cfg, exists, err = loadConfig(path)
	return cfg, path, exists, err
}

func (a *app) configViewCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "view",
		Short: "Print the config file, tokens redacted",
		Long: `Print the config file as YAML (-o json: JSON), with every inline token shown as
REDACTED. A tokenFile is shown as its path.`,
		Args: argsNamed(),
		RunE: func(*cobra.Command, []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			cfg, path, exists, err := a.readConfig()
			if err != nil {
				return err
			}
			if !exists {
				fmt.Fprintf(a.stderr, "no config file at %s\n", path)
			}
			return writeConfigDoc(p, cfg.redact())
		},
	}
}

// writeConfigDoc writes cfg as JSON (-o json) or as YAML (anything else).
func writeConfigDoc(p *printer, cfg *configFile) error {
	w := p.w
	if p.scripting() {
		b, err := json.Marshal(cfg)
		if err != nil {
			return err
		}
		return p.emit(b, nil, "")
	}
	if p.format == formatJSON {
		b, err := json.MarshalIndent(cfg, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	enc := yamlv3.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(cfg); err != nil {
		return err
	}
	return enc.Close()
}

func (a *app) configGetContextsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts; * marks the current one",
		Long: `List the config file's contexts, the current one (currentContext) marked with
*. -o wide adds the TLS files and the token's source; -o json and -o yaml print
the contexts as "config view" does.`,
		Args: argsNamed(),
		RunE: func(*cobra.Command, []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			cfg, _, _, err := a.readConfig()
			if err != nil {
				return err
			}
			if p.structured() {
				return writeConfigDoc(p, cfg.redact())
			}
			wide := p.format == formatWide
			tw := newTabWriter(a.stdout)
			head := []string{"CURRENT", "NAME", "SERVER", "FEDERATION", "CLUSTER"}
			if wide {
				head = append(head, "CA-FILE", "CERT-FILE", "TOKEN")
			}
			row(tw, head...)
			for _, c := range cfg.Contexts {
				cur := ""
				if c.Name == cfg.CurrentContext {
					cur = "*"
				}
				cells := []string{cur, c.Name, c.Server, c.Federation, c.Cluster}
				if wide {
					tok := ""
					switch {
					case c.Token != "":
						tok = "inline"
					case c.TokenFile != "":
						tok = "file " + c.TokenFile
					}
					cells = append(cells, c.CAFile, c.CertFile, tok)
				}
				row(tw, cells...)
			}
			return tw.Flush()
		},
	}
}

func (a *app) configUseContextCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "use-context NAME",
		Short: "Make a context the current one",
		Args:  argsNamed("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, path, exists, err := a.readConfig()
			if err != nil {
				return err
			}
			if cfg.find(args[0]) == nil {
				return unknownContext(args[0], path, exists, cfg)
			}
			cfg.CurrentContext = args[0]
			if err := saveConfig(path, cfg); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "current context: %s\n", args[0])
			return nil
		},
	}
}

// unknownContext is the error of a command given a context the file does
// not have.
func unknownContext(name, path string, exists bool, cfg *configFile) error {
	if !exists {
		return fmt.Errorf("no context %q: there is no config file at %s (make one with peloton config set-context)", name, path)
	}
	return fmt.Errorf("no context %q in %s; it has %s", name, path, cfg.names())
}

func (a *app) configSetContextCommand() *cobra.Command {
	var v configContext
	cmd := &cobra.Command{
		Use:   "set-context NAME [--server ADDR] [--federation ADDR] [--cluster NAME] [--ca-file FILE] [--cert-file FILE] [--key-file FILE] [--token-file FILE] [--tls-server-name NAME]",
		Short: "Create a context, or change the fields of one",
		Long: `Create the context NAME, or change the fields of the one there is: only the
flags given change (an empty value removes a field). Files are stored as
absolute paths. Other fields can be edited in the file by hand: a path there
that is relative is relative to the file's directory, and ~/ is the home
directory.

The token is stored only as a file's path (--token-file), which is read at
every use: a token given on the command line would stay in the shell's
history, and one written into the config file would go wherever the file
goes. A token can still be written inline as "token:" by hand.

The context does not become the current one: use it with --context NAME, or
make it current with "peloton config use-context NAME".`,
		Args: argsNamed("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkContextName(name); err != nil {
				return usageErrorf("%v", err)
			}
			if a.globals != nil && a.globals.Changed("token") {
				return usageErrorf("set-context does not store --token; put the token in a file readable only by you and give --token-file FILE")
			}
			fs := cmd.Flags()
			if fs.Changed("cluster") && v.Cluster != "" {
				if err := cluster.ValidateClusterName(v.Cluster); err != nil {
					return usageErrorf("invalid --cluster %q: must be 1 to 63 lower-case letters, digits or '-', starting and ending with a letter or digit", v.Cluster)
				}
			}
			cfg, path, _, err := a.readConfig()
			if err != nil {
				return err
			}
			c := cfg.find(name)
			verb := "changed"
			if c == nil {
				c = &configContext{Name: name}
				cfg.Contexts = append(cfg.Contexts, c)
				verb = "created"
			}
			for _, f := range []struct {
				flag     string
				dst, val *string
				file     bool
			}{
				{"server", &c.Server, &v.Server, false},
				{"federation", &c.Federation, &v.Federation, false},
				{"cluster", &c.Cluster, &v.Cluster, false},
				{"ca-file", &c.CAFile, &v.CAFile, true},
				{"cert-file", &c.CertFile, &v.CertFile, true},
				{"key-file", &c.KeyFile, &v.KeyFile, true},
				{"tls-server-name", &c.TLSServerName, &v.TLSServerName, false},
				{"token-file", &c.TokenFile, &v.TokenFile, true},
			} {
				if !fs.Changed(f.flag) {
					continue
				}
				val := *f.val
				if f.file && val != "" {
					// Relative to where the command ran, as the user meant
					// it; the file may be read from anywhere later.
					if val, err = filepath.Abs(val); err != nil {
						return usageErrorf("invalid --%s: %v", f.flag, err)
					}
				}
				*f.dst = val
			}
			if fs.Changed("token-file") && c.TokenFile != "" {
				c.Token = "" // a context has one source of token
			}
			if err := saveConfig(path, cfg); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "context %s %s in %s\n", name, verb, path)
			return nil
		},
	}
	fs := cmd.Flags()
	// These shadow the root's flags of the same names: here they are what
	// to store, not how to connect.
	fs.StringVar(&v.Server, "server", "", "gRPC address of the cluster stack (host:port)")
	fs.StringVar(&v.Federation, "federation", "", "gRPC address of the federation")
	fs.StringVar(&v.Cluster, "cluster", "", "cluster of the federation that job, task, pool, host and update commands go to, as --cluster")
	fs.StringVar(&v.CAFile, "ca-file", "", "PEM file of the CA that signed the servers' certificates")
	fs.StringVar(&v.CertFile, "cert-file", "", "PEM client certificate, for servers that require one")
	fs.StringVar(&v.KeyFile, "key-file", "", "PEM private key of --cert-file")
	fs.StringVar(&v.TLSServerName, "tls-server-name", "", "name the servers' certificates must carry, if not the host dialled")
	fs.StringVar(&v.TokenFile, "token-file", "", "file that holds the bearer token (read at every use; the file itself is not copied)")
	return cmd
}

func (a *app) configDeleteContextCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete-context NAME",
		Short: "Remove a context from the config file",
		Long:  `Remove the context NAME. If it was the current one, no context is current after.`,
		Args:  argsNamed("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, path, exists, err := a.readConfig()
			if err != nil {
				return err
			}
			name := args[0]
			if cfg.find(name) == nil {
				return unknownContext(name, path, exists, cfg)
			}
			kept := cfg.Contexts[:0]
			for _, c := range cfg.Contexts {
				if c.Name != name {
					kept = append(kept, c)
				}
			}
			cfg.Contexts = kept
			msg := fmt.Sprintf("context %s deleted from %s", name, path)
			if cfg.CurrentContext == name {
				cfg.CurrentContext = ""
				msg += "; no context is current now"
			}
			if err := saveConfig(path, cfg); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, msg)
			return nil
		},
	}
}
