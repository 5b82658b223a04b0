package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// checkYAML finds what the YAML to JSON conversion would hide or garble,
// before it runs: a second document in the file (silently ignored), a key
// given twice in one mapping (one value silently wins), and .nan or .inf
// (JSON has no such number). Each error names the line and the field path.
func checkYAML(data []byte) error {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	docs := 0
	for {
		var n yamlv3.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		docs++
		if docs > 1 {
			return fmt.Errorf("line %d: a second YAML document; a spec file holds one spec", n.Line)
		}
		if err := checkNode(&n, ""); err != nil {
			return err
		}
	}
}

func checkNode(n *yamlv3.Node, path string) error {
	switch n.Kind {
	case yamlv3.DocumentNode:
		for _, c := range n.Content {
			if err := checkNode(c, path); err != nil {
				return err
			}
		}
	case yamlv3.MappingNode:
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := k.Value
			if path != "" {
				child = path + "." + k.Value
			}
			if first, dup := seen[k.Value]; dup {
				return fmt.Errorf("line %d: %s: given twice (first at line %d)", k.Line, child, first)
			}
			seen[k.Value] = k.Line
			if err := checkNode(v, child); err != nil {
				return err
			}
		}
	case yamlv3.SequenceNode:
		for i, c := range n.Content {
			if err := checkNode(c, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case yamlv3.ScalarNode:
		if n.Tag == "!!float" {
			switch strings.ToLower(strings.TrimLeft(n.Value, "+-")) {
			case ".nan", ".inf":
				return fmt.Errorf("line %d: %s: %s is not a number a spec can hold", n.Line, path, n.Value)
			}
		}
	}
	return nil
}
