package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// configEnv names the environment variable that says where the config file
// is, unless --config does.
const configEnv = "PELOTON_CONFIG"

// configFile is the CLI's config file: named contexts, each a cluster (or
// a federation) and what it takes to reach it, and the one in use when
// --context names none. docs/cli-config.md describes it for users.
type configFile struct {
	CurrentContext string           `yaml:"currentContext,omitempty" json:"currentContext,omitempty"`
	Contexts       []*configContext `yaml:"contexts,omitempty" json:"contexts"`
}

// configContext is one named context. Every field but Name is optional; a
// field left out leaves the flag's own default. File paths are as written:
// resolve turns them into paths to open.
type configContext struct {
	Name string `yaml:"name" json:"name"`
	// Server, Federation and Cluster are the defaults of --server,
	// --federation and --cluster.
	Server     string `yaml:"server,omitempty" json:"server,omitempty"`
	Federation string `yaml:"federation,omitempty" json:"federation,omitempty"`
	Cluster    string `yaml:"cluster,omitempty" json:"cluster,omitempty"`
	// CAFile, CertFile, KeyFile and TLSServerName are the defaults of the
	// flags of the same names.
	CAFile        string `yaml:"caFile,omitempty" json:"caFile,omitempty"`
	CertFile      string `yaml:"certFile,omitempty" json:"certFile,omitempty"`
	KeyFile       string `yaml:"keyFile,omitempty" json:"keyFile,omitempty"`
	TLSServerName string `yaml:"tlsServerName,omitempty" json:"tlsServerName,omitempty"`
	// Token is the bearer token itself; TokenFile a file that holds it,
	// read at every use. At most one of the two.
	Token     string `yaml:"token,omitempty" json:"token,omitempty"`
	TokenFile string `yaml:"tokenFile,omitempty" json:"tokenFile,omitempty"`
}

// redacted is what view and get-contexts show instead of a token.
const redacted = "REDACTED"

// contextNameRE is what a context may be called: something a shell passes
// without quotes and a table shows in one column.
var contextNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func checkContextName(name string) error {
	if !contextNameRE.MatchString(name) {
		return fmt.Errorf("context name %q: must be 1 to 63 of A-Z a-z 0-9 . _ -, starting with a letter or digit", name)
	}
	return nil
}

// find returns the context named name, or nil.
func (c *configFile) find(name string) *configContext {
	for _, x := range c.Contexts {
		if x.Name == name {
			return x
		}
	}
	return nil
}

// names lists the contexts' names, for messages.
func (c *configFile) names() string {
	if len(c.Contexts) == 0 {
		return "none"
	}
	n := make([]string, len(c.Contexts))
	for i, x := range c.Contexts {
		n[i] = x.Name
	}
	return strings.Join(n, ", ")
}

// redact returns a copy of c whose inline tokens read REDACTED.
func (c *configFile) redact() *configFile {
	out := &configFile{CurrentContext: c.CurrentContext, Contexts: make([]*configContext, len(c.Contexts))}
	for i, x := range c.Contexts {
		y := *x
		if y.Token != "" {
			y.Token = redacted
		}
		out.Contexts[i] = &y
	}
	return out
}

// configPath says which config file this invocation reads: --config, else
// $PELOTON_CONFIG, else peloton/config.yaml under $XDG_CONFIG_HOME or
// ~/.config. It fails only when none of those can be told (no --config,
// no environment, no home directory).
func (a *app) configPath() (string, error) {
	if a.configFlag != "" {
		return a.configFlag, nil
	}
	if p := a.getenv(configEnv); p != "" {
		return p, nil
	}
	if x := a.getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "peloton", "config.yaml"), nil
	}
	home, err := a.home()
	if err != nil || home == "" {
		return "", fmt.Errorf("cannot tell where the config file is (no home directory: %v); give --config or $%s", err, configEnv)
	}
	return filepath.Join(home, ".config", "peloton", "config.yaml"), nil
}

// loadConfig reads the config file at path. A file that does not exist is
// an empty config (exists false); one that does not parse is an error that
// names the file, the line and the field.
func loadConfig(path string) (cfg *configFile, exists bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &configFile{}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("config file %s: %w", path, err)
	}
	cfg, err = parseConfig(data)
	if err != nil {
		return nil, true, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, true, nil
}

// parseConfig decodes a config file strictly: one YAML document, every
// key known and given once, every value of the right shape, and context
// names valid and distinct. yaml.v3's own strict mode names Go types in
// its errors; this walk names the fields as the file spells them.
func parseConfig(data []byte) (*configFile, error) {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	var doc yamlv3.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &configFile{}, nil // an empty file
		}
		return nil, err
	}
	var next yamlv3.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("line %d: a second YAML document; the config file holds one", next.Line)
	}
	if err := checkNode(&doc, ""); err != nil { // keys given twice
		return nil, err
	}
	root := &doc
	if root.Kind == yamlv3.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yamlv3.ScalarNode && root.Tag == "!!null" {
		return &configFile{}, nil // only comments
	}
	if err := checkShape(root, "", reflect.TypeFor[configFile]()); err != nil {
		return nil, err
	}
	var cfg configFile
	if err := root.Decode(&cfg); err != nil {
		return nil, err
	}
	seen := map[string]int{}
	for i, c := range cfg.Contexts {
		if c == nil {
			return nil, fmt.Errorf("contexts[%d]: want a context, got nothing", i)
		}
		if c.Name == "" {
			return nil, fmt.Errorf("contexts[%d].name: missing", i)
		}
		if err := checkContextName(c.Name); err != nil {
			return nil, fmt.Errorf("contexts[%d].name: %v", i, err)
		}
		if first, dup := seen[c.Name]; dup {
			return nil, fmt.Errorf("contexts[%d].name: %q is also contexts[%d]'s", i, c.Name, first)
		}
		seen[c.Name] = i
		if c.Token != "" && c.TokenFile != "" {
			return nil, fmt.Errorf("contexts[%d] (%s): token and tokenFile are both set; give one", i, c.Name)
		}
	}
	return &cfg, nil
}

// checkShape checks n against the Go type t it is decoded into: a struct
// is a mapping of its yaml-tagged keys only, a slice a sequence, a string
// a scalar. Errors name the line and the field path.
func checkShape(n *yamlv3.Node, path string, t reflect.Type) error {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	where := func() string {
		if path == "" {
			return fmt.Sprintf("line %d", n.Line)
		}
		return fmt.Sprintf("line %d: %s", n.Line, path)
	}
	if n.Kind == yamlv3.ScalarNode && n.Tag == "!!null" {
		return nil // left out
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yamlv3.MappingNode {
			return fmt.Errorf("%s: want a mapping of fields", where())
		}
		fields := map[string]reflect.Type{}
		var known []string
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			fields[name] = f.Type
			known = append(known, name)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := k.Value
			if path != "" {
				child = path + "." + k.Value
			}
			ft, ok := fields[k.Value]
			if !ok {
				return fmt.Errorf("line %d: %s: unknown field (known: %s)", k.Line, child, strings.Join(known, ", "))
			}
			if err := checkShape(v, child, ft); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yamlv3.SequenceNode {
			return fmt.Errorf("%s: want a list", where())
		}
		for i, c := range n.Content {
			if err := checkShape(c, fmt.Sprintf("%s[%d]", path, i), t.Elem()); err != nil {
				return err
			}
		}
	case reflect.String:
		if n.Kind != yamlv3.ScalarNode {
			return fmt.Errorf("%s: want a string", where())
		}
	}
	return nil
}

// saveConfig writes cfg to path so that a reader sees the old file or the
// new one, never a part: a temporary file in the same directory, renamed
// over it. The file is 0600 (it may hold tokens) and a directory made for
// it 0700. A path that is a symbolic link (dotfiles kept elsewhere) has its
// target replaced, not the link.
func saveConfig(path string, cfg *configFile) error {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	var buf bytes.Buffer
	buf.WriteString("# peloton CLI config: see docs/cli-config.md. The peloton config commands rewrite this file.\n")
	enc := yamlv3.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(cfg); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after a failure; gone after the rename
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

// configFilePath resolves a path written in the config file at file: "~"
// and "~/..." are under the home directory, a relative path is relative to
// the file's own directory (so a config file and its certificates can move
// together), an absolute path is itself.
func (a *app) configFilePath(file, p string) (string, error) {
	switch {
	case p == "":
		return "", nil
	case p == "~" || strings.HasPrefix(p, "~/"):
		home, err := a.home()
		if err != nil || home == "" {
			return "", fmt.Errorf("%s starts with ~ but there is no home directory: %v", p, err)
		}
		return filepath.Join(home, strings.TrimPrefix(p, "~")), nil
	case filepath.IsAbs(p):
		return p, nil
	}
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, p), nil
}
