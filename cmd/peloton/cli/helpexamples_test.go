package cli

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// leafCommands are the commands under root that run something, not
// cobra's own (help, completion).
func leafCommands(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			walk(sub)
		}
		if !c.HasSubCommands() && c.Runnable() {
			out = append(out, c)
		}
	}
	walk(root)
	return out
}

// TestEveryCommandHasExamples: each command's help shows how to run it.
func TestEveryCommandHasExamples(t *testing.T) {
	for _, c := range leafCommands(NewRootCommand(io.Discard, io.Discard)) {
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s has no Example: add one to helpExamples (helpexamples.go) or to the command", c.CommandPath())
		}
	}
}

// TestExamplesParse: every "peloton ..." line of every Example names the
// command it is the example of, with flags that command takes and as many
// arguments as it wants, so the examples cannot rot as flags change.
func TestExamplesParse(t *testing.T) {
	for _, c := range leafCommands(NewRootCommand(io.Discard, io.Discard)) {
		n := 0
		for _, line := range strings.Split(c.Example, "\n") {
			args, ok := exampleArgs(line)
			if !ok {
				continue
			}
			n++
			// A fresh tree per line: parsing sets flag values.
			root := NewRootCommand(io.Discard, io.Discard)
			found, rest, err := root.Find(args)
			if err != nil || found.CommandPath() != c.CommandPath() {
				t.Errorf("%s: example %q runs %v (%v), not this command", c.CommandPath(), line, commandPath(found), err)
				continue
			}
			if err := found.ParseFlags(rest); err != nil {
				t.Errorf("%s: example %q: %v", c.CommandPath(), line, err)
				continue
			}
			if err := found.ValidateArgs(found.Flags().Args()); err != nil {
				t.Errorf("%s: example %q: %v", c.CommandPath(), line, err)
			}
		}
		if n == 0 && strings.TrimSpace(c.Example) != "" {
			t.Errorf("%s: no example line runs peloton", c.CommandPath())
		}
	}
}

func commandPath(c *cobra.Command) string {
	if c == nil {
		return "nothing"
	}
	return c.CommandPath()
}

// exampleArgs is the arguments after "peloton" of an example line: the
// part of a pipeline that runs peloton, without a trailing comment or
// redirection. ok is false for a line that runs no peloton.
func exampleArgs(line string) ([]string, bool) {
	words := shellWords(line)
	for i, w := range words {
		if w == "peloton" && (i == 0 || words[i-1] == "|") {
			words = words[i+1:]
			for j, w := range words {
				if w == "|" || w == ">" || w == "#" || strings.HasPrefix(w, "#") {
					return words[:j], true
				}
			}
			return words, true
		}
	}
	return nil, false
}

// shellWords splits a line as a POSIX shell would its words, with single
// and double quotes (enough for the examples: no variables, no escapes
// outside double quotes).
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'' && r == '\'', quote == '"' && r == '"':
			quote = 0
		case quote == '"' && r == '\\' && i+1 < len(rs):
			i++
			cur.WriteRune(rs[i])
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// TestReadmeScriptingExamplesParse: the scripting examples of README.md
// (not run by TestReadmeExamples: they need jobs of their own) parse
// against their commands.
func TestReadmeScriptingExamplesParse(t *testing.T) {
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "### Scripting\n")
	if !ok {
		t.Fatal("README.md has no Scripting section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	n := 0
	for _, line := range strings.Split(sec, "\n") {
		args, ok := exampleArgs(line)
		if !ok || len(args) == 0 || args[0] == "completion" {
			continue
		}
		n++
		root := NewRootCommand(io.Discard, io.Discard)
		found, rest, err := root.Find(args)
		if err == nil {
			err = found.ParseFlags(rest)
		}
		if err == nil {
			err = found.ValidateArgs(found.Flags().Args())
		}
		if err == nil && found.Flags().Changed("output") {
			_, err = parseOutput(io.Discard, found.Flags().Lookup("output").Value.String(), false)
		}
		if err != nil {
			t.Errorf("README: %q: %v", line, err)
		}
	}
	if n < 3 {
		t.Errorf("found %d peloton lines in README's Scripting section; the parser is broken", n)
	}
}
