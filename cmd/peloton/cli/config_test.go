package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigCommands: set-context creates and changes contexts in the
// default file (0600, in a 0700 directory), use-context picks one,
// get-contexts marks it, view hides tokens, delete-context removes one.
func TestConfigCommands(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"HOME": home}
	path := filepath.Join(home, ".config", "peloton", "config.yaml")
	run := func(args ...string) result {
		t.Helper()
		r := runEnv(t, env, args...)
		if r.code != exitOK {
			t.Fatalf("peloton %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
		}
		return r
	}

	if r := run("config", "get-contexts"); r.stdout != "CURRENT   NAME   SERVER   FEDERATION   CLUSTER\n" {
		t.Errorf("get-contexts with no file: %q", r.stdout)
	}
	r := run("config", "set-context", "prod", "--server", "peloton.example:5391", "--ca-file", "ca.pem", "--token-file", "/etc/peloton/token")
	if r.stdout != "context prod created in "+path+"\n" {
		t.Errorf("set-context prod: %q", r.stdout)
	}
	run("config", "set-context", "dev", "--server", "127.0.0.1:5391", "--cluster", "east-1", "--federation", "127.0.0.1:5392")
	// Only the flags given change; an empty value removes the field.
	run("config", "set-context", "prod", "--federation", "fed.example:5393", "--ca-file", "")
	run("config", "use-context", "prod")

	for name, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %o, want %o", name, fi.Mode().Perm(), want)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseConfig(data)
	if err != nil {
		t.Fatalf("the file set-context wrote does not parse: %v\n%s", err, data)
	}
	if cfg.CurrentContext != "prod" || len(cfg.Contexts) != 2 {
		t.Fatalf("config %+v", cfg)
	}
	prod, dev := cfg.find("prod"), cfg.find("dev")
	if *prod != (configContext{Name: "prod", Server: "peloton.example:5391", Federation: "fed.example:5393", TokenFile: "/etc/peloton/token"}) {
		t.Errorf("prod = %+v", *prod)
	}
	if *dev != (configContext{Name: "dev", Server: "127.0.0.1:5391", Federation: "127.0.0.1:5392", Cluster: "east-1"}) {
		t.Errorf("dev = %+v", *dev)
	}
	// A relative file is stored as the absolute path it meant here.
	run("config", "set-context", "dev", "--cert-file", "alice.pem")
	data, _ = os.ReadFile(path)
	if wd, _ := os.Getwd(); !strings.Contains(string(data), "certFile: "+filepath.Join(wd, "alice.pem")+"\n") {
		t.Errorf("--cert-file alice.pem stored as:\n%s", data)
	}

	r = run("config", "get-contexts")
	want := "CURRENT   NAME   SERVER                 FEDERATION         CLUSTER\n" +
		"*         prod   peloton.example:5391   fed.example:5393   -\n" +
		"-         dev    127.0.0.1:5391         127.0.0.1:5392     east-1\n"
	if r.stdout != want {
		t.Errorf("get-contexts:\n%s\nwant:\n%s", r.stdout, want)
	}
	r = run("config", "get-contexts", "-o", "wide")
	if !strings.Contains(r.stdout, "file /etc/peloton/token") {
		t.Errorf("get-contexts -o wide does not show the token's file:\n%s", r.stdout)
	}

	// An inline token written by hand is never printed.
	if err := os.WriteFile(path, []byte("currentContext: prod\ncontexts:\n  - name: prod\n    server: a:1\n    token: s3cret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"config", "view"}, {"config", "view", "-o", "json"}, {"config", "get-contexts", "-o", "yaml"}, {"config", "get-contexts", "-o", "wide"}} {
		r := run(args...)
		if strings.Contains(r.stdout+r.stderr, "s3cret") {
			t.Errorf("peloton %s shows the token:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
	if r := run("config", "view"); r.stdout != "currentContext: prod\ncontexts:\n  - name: prod\n    server: a:1\n    token: REDACTED\n" {
		t.Errorf("config view:\n%s", r.stdout)
	}
	// --token-file replaces an inline token: a context has one.
	run("config", "set-context", "prod", "--token-file", "/t")
	if data, _ := os.ReadFile(path); strings.Contains(string(data), "s3cret") || !strings.Contains(string(data), "tokenFile: /t") {
		t.Errorf("after --token-file the file holds:\n%s", data)
	}

	if r := run("config", "delete-context", "prod"); !strings.Contains(r.stdout, "context prod deleted from "+path+"; no context is current now") {
		t.Errorf("delete-context prod: %q", r.stdout)
	}
	if r := run("config", "get-contexts"); strings.Contains(r.stdout, "prod") {
		t.Errorf("prod still listed:\n%s", r.stdout)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"config", "use-context", "nope"}, exitError, "Error: no context \"nope\" in " + path + "; it has none"},
		{[]string{"config", "delete-context", "nope"}, exitError, "Error: no context \"nope\" in " + path + "; it has none"},
		{[]string{"config", "set-context", "x", "--token", "t"}, exitUsage, "Error: set-context does not store --token; put the token in a file readable only by you and give --token-file FILE"},
		{[]string{"config", "set-context", "bad name"}, exitUsage, `Error: context name "bad name": must be 1 to 63 of A-Z a-z 0-9 . _ -, starting with a letter or digit`},
		{[]string{"config", "set-context", "x", "--cluster", "Bad"}, exitUsage, `Error: invalid --cluster "Bad": ...`},
		{[]string{"config", "use-context"}, exitUsage, "Error: missing NAME"},
	} {
		wantError(t, runEnv(t, env, tc.args...), tc.code, tc.want, tc.args...)
	}
	if _, err := os.Stat(filepath.Join(home, ".config", "peloton", "config.yaml")); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("the config directory holds %d entries, want only the file (no temporary files left)", len(entries))
	}
}

// TestConfigPath: --config over $PELOTON_CONFIG over $XDG_CONFIG_HOME over
// ~/.config.
func TestConfigPath(t *testing.T) {
	dir := t.TempDir()
	home, xdg, env, flag := filepath.Join(dir, "home"), filepath.Join(dir, "xdg"), filepath.Join(dir, "env.yaml"), filepath.Join(dir, "flag.yaml")
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"HOME": home}, nil, filepath.Join(home, ".config", "peloton", "config.yaml")},
		{map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}, nil, filepath.Join(xdg, "peloton", "config.yaml")},
		{map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg, configEnv: env}, nil, env},
		{map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg, configEnv: env}, []string{"--config", flag}, flag},
	} {
		r := runEnv(t, tc.env, append(tc.args, "config", "set-context", "c")...)
		if r.code != exitOK || r.stdout != "context c created in "+tc.want+"\n" {
			t.Errorf("env %v, args %v: exit %d, stdout %q, stderr %q; want the file %s", tc.env, tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	r := runEnv(t, nil, "config", "set-context", "c")
	wantError(t, r, exitError, "Error: cannot tell where the config file is (no home directory: $HOME is not set); give --config or $PELOTON_CONFIG")
	// With no file to read there are no contexts; commands still run.
	if r := runEnv(t, nil, "config", "get-contexts"); r.code != exitError {
		t.Errorf("get-contexts with no home: exit %d", r.code)
	}
}

// TestMalformedConfig: a config file that does not parse fails every
// command that connects, naming the file, the line and the field; the
// commands that connect to nothing still run.
func TestMalformedConfig(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"unknown field", "contexts:\n  - name: a\n    servr: x:1\n",
			"line 3: contexts[0].servr: unknown field (known: name, server, federation, cluster, caFile, certFile, keyFile, tlsServerName, token, tokenFile)"},
		{"unknown top-level field", "current-context: a\n", "line 1: current-context: unknown field (known: currentContext, contexts)"},
		{"contexts not a list", "contexts: a\n", "line 1: contexts: want a list"},
		{"a context not a mapping", "contexts:\n  - a\n", "line 2: contexts[0]: want a mapping of fields"},
		{"a field not a string", "contexts:\n  - name: a\n    server: [x]\n", "line 3: contexts[0].server: want a string"},
		{"key given twice", "contexts:\n  - name: a\n    server: x:1\n    server: y:1\n", "line 4: contexts[0].server: given twice (first at line 3)"},
		{"no name", "contexts:\n  - server: x:1\n", "contexts[0].name: missing"},
		{"bad name", "contexts:\n  - name: a b\n", `contexts[0].name: context name "a b": must be 1 to 63`},
		{"name given twice", "contexts:\n  - name: a\n  - name: a\n", `contexts[1].name: "a" is also contexts[0]'s`},
		{"token and tokenFile", "contexts:\n  - name: a\n    token: t\n    tokenFile: f\n", "contexts[0] (a): token and tokenFile are both set; give one"},
		{"two documents", "contexts: []\n---\ncontexts: []\n", "a second YAML document; the config file holds one"},
		{"not YAML", "contexts: [\n", "yaml: line 1: did not find expected node content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.text)
			for _, args := range [][]string{{"job", "list"}, {"config", "view"}, {"config", "set-context", "x"}} {
				r := runCLI(t, "", append([]string{"--config", path}, args...)...)
				wantStderr(t, r, exitError, "Error: config file "+path+": ", tc.want)
			}
			if r := runCLI(t, "", "--config", path, "version"); r.code != exitOK {
				t.Errorf("version with a malformed config file: exit %d, stderr %q", r.code, r.stderr)
			}
		})
	}

	// An empty file, or one of comments, has no contexts.
	for _, text := range []string{"", "# nothing yet\n"} {
		path := writeConfig(t, text)
		if r := runCLI(t, "", "--config", path, "config", "get-contexts"); r.code != exitOK {
			t.Errorf("config file %q: exit %d, stderr %q", text, r.code, r.stderr)
		}
	}

	path := writeConfig(t, "currentContext: gone\ncontexts:\n  - name: a\n  - name: b\n")
	r := runCLI(t, "", "--config", path, "job", "list")
	wantStderr(t, r, exitError, "Error: config file "+path+`: currentContext "gone" names no context (it has a, b); pick one with peloton config use-context NAME`)
	r = runCLI(t, "", "--config", path, "--context", "c", "job", "list")
	wantStderr(t, r, exitUsage, `Error: unknown --context "c": `+path+" has a, b")
	missing := filepath.Join(t.TempDir(), "none.yaml")
	r = runCLI(t, "", "--config", missing, "--context", "c", "job", "list")
	wantStderr(t, r, exitUsage, `Error: unknown --context "c": there is no config file at `+missing)
}

// TestDocumentedConfigFilesParse: every config file README.md and
// docs/cli-config.md show (a yaml block with contexts) is one the CLI
// reads, with the contexts the text says.
func TestDocumentedConfigFilesParse(t *testing.T) {
	found := 0
	for _, doc := range []string{"../../../README.md", "../../../docs/cli-config.md"} {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rest := string(data)
		for {
			_, after, ok := strings.Cut(rest, "```yaml\n")
			if !ok {
				break
			}
			block, tail, _ := strings.Cut(after, "```")
			rest = tail
			if !strings.Contains(block, "\ncontexts:\n") {
				continue
			}
			found++
			cfg, err := parseConfig([]byte(block))
			if err != nil {
				t.Errorf("%s: a config file that does not parse: %v\n%s", doc, err, block)
				continue
			}
			if cfg.CurrentContext != "prod" || cfg.find("prod") == nil || cfg.find("prod").Server != "peloton.example:5391" {
				t.Errorf("%s: config %+v; the text describes context prod at peloton.example:5391, current", doc, cfg)
			}
		}
	}
	if found != 2 {
		t.Errorf("found %d config files in the docs, want README's and cli-config.md's", found)
	}
}
