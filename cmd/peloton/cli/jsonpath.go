package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A small JSONPath evaluator for -o jsonpath=TEMPLATE and -o
// custom-columns, over the JSON form of an answer (the one -o json
// prints, 64-bit integers as numbers). It takes the part of kubectl's
// template language scripts use:
//
//	{.spec.name}               a field ($ or @ may start the path)
//	{.jobs[*].id}              every element of a list; [0], [-1], [1:3]
//	{.spec.labels['a.b']}      a key that is not a plain name
//	{..id}                     every id at any depth
//	{.spec.*}                  every value of an object or list
//	{range .jobs[*]}...{end}   the text between, once per element; paths
//	                           inside are relative to the element
//	{"\n"}                     literal text (a Go-quoted string)
//
// Filters ([?(...)]) are not taken. A missing field yields nothing, as in
// kubectl. Several values of one path are printed separated by spaces;
// strings as they are, other values as compact JSON.

// jpTemplate is a parsed template: text, paths and ranges in order.
type jpTemplate struct {
	src   string
	nodes []jpNode
}

// jpNode is one part of a template: literal text, a path to print, or a
// range over a path with a body.
type jpNode struct {
	text string
	path *jpPath
	rng  *jpPath
	// body is a range's nodes, behind a pointer so that parsing can keep
	// appending to it while the list holding the range grows.
	body  *[]jpNode
	isLit bool
}

// jpPath is a path expression: steps from the root ($) or from the
// current element (@, the default).
type jpPath struct {
	src   string
	root  bool
	steps []jpStep
}

type jpStepKind int

const (
	jpField jpStepKind = iota
	jpIndex
	jpSlice
	jpAll
	jpDescend
)

// jpStep is one step of a path: a field (or key), an index, a slice,
// every element (*), or a field at any depth (..name).
type jpStep struct {
	kind       jpStepKind
	name       string
	index      int
	start, end *int
}

// jpError is a template that does not parse: the template, the position
// (1-based, in bytes) and what is wrong there.
func jpError(src string, pos int, format string, args ...any) error {
	return usageErrorf("invalid jsonpath template %q: at position %d: %s", src, pos+1, fmt.Sprintf(format, args...))
}

// parseJSONPath parses a template.
func parseJSONPath(src string) (*jpTemplate, error) {
	t := &jpTemplate{src: src}
	// stack holds the node lists of open ranges; the last is written to.
	stack := []*[]jpNode{&t.nodes}
	var open []int
	i := 0
	for i < len(src) {
		cur := stack[len(stack)-1]
		j := strings.IndexByte(src[i:], '{')
		if j < 0 {
			*cur = append(*cur, jpNode{text: src[i:], isLit: true})
			break
		}
		if j > 0 {
			*cur = append(*cur, jpNode{text: src[i : i+j], isLit: true})
		}
		start := i + j
		end, err := closingBrace(src, start)
		if err != nil {
			return nil, err
		}
		inner := src[start+1 : end]
		body := strings.TrimSpace(inner)
		off := start + 1 + strings.Index(inner, body)
		switch {
		case body == "end":
			if len(stack) == 1 {
				return nil, jpError(src, start, "{end} without {range}")
			}
			stack, open = stack[:len(stack)-1], open[:len(open)-1]
		case strings.HasPrefix(body, "range ") || body == "range":
			p, err := parsePath(src, strings.TrimSpace(strings.TrimPrefix(body, "range")), off+len("range "))
			if err != nil {
				return nil, err
			}
			body := &[]jpNode{}
			*cur = append(*cur, jpNode{rng: p, body: body})
			stack, open = append(stack, body), append(open, start)
		case strings.HasPrefix(body, `"`):
			s, err := strconv.Unquote(body)
			if err != nil {
				return nil, jpError(src, off, "literal text %s is not a quoted string", body)
			}
			*cur = append(*cur, jpNode{text: s, isLit: true})
		default:
			p, err := parsePath(src, body, off)
			if err != nil {
				return nil, err
			}
			*cur = append(*cur, jpNode{path: p})
		}
		i = end + 1
	}
	if len(open) > 0 {
		return nil, jpError(src, open[len(open)-1], "{range} without {end}")
	}
	return t, nil
}

// closingBrace is the index of the } that closes the { at start, skipping
// braces inside quoted strings.
func closingBrace(src string, start int) (int, error) {
	var quote byte
	for k := start + 1; k < len(src); k++ {
		c := src[k]
		switch {
		case quote != 0 && c == '\\':
			k++
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
		case c == '"' || c == '\'':
			quote = c
		case c == '{':
			return 0, jpError(src, k, "unexpected { inside {...}")
		case c == '}':
			return k, nil
		}
	}
	return 0, jpError(src, start, "unclosed {")
}

// parsePath parses the path expression expr, found at offset off of the
// template src (for error positions).
func parsePath(src, expr string, off int) (*jpPath, error) {
	p := &jpPath{src: expr}
	if expr == "" {
		return nil, jpError(src, off, "empty path; want e.g. {.spec.name}")
	}
	i := 0
	switch expr[0] {
	case '$':
		p.root, i = true, 1
	case '@':
		i = 1
	case '.', '[':
	default:
		return nil, jpError(src, off, "path %q must start with . or [ (or $ or @)", expr)
	}
	for i < len(expr) {
		var st jpStep
		var err error
		switch {
		case strings.HasPrefix(expr[i:], ".."):
			j := i + 2
			for j < len(expr) && isNameChar(expr[j]) {
				j++
			}
			if j == i+2 {
				return nil, jpError(src, off+i, "want a field name after ..")
			}
			st, i = jpStep{kind: jpDescend, name: expr[i+2 : j]}, j
		case expr[i] == '.':
			j := i + 1
			if j < len(expr) && expr[j] == '*' {
				st, i = jpStep{kind: jpAll}, j+1
				break
			}
			for j < len(expr) && isNameChar(expr[j]) {
				j++
			}
			if j == i+1 {
				if j == len(expr) && i == 0 {
					// "{.}" or "{@.}": the current value itself.
					return p, nil
				}
				return nil, jpError(src, off+i, "want a field name after .")
			}
			st, i = jpStep{kind: jpField, name: expr[i+1 : j]}, j
		case expr[i] == '[':
			st, i, err = parseBracket(src, expr, i, off)
			if err != nil {
				return nil, err
			}
		default:
			return nil, jpError(src, off+i, "unexpected %q in path %q", expr[i], expr)
		}
		p.steps = append(p.steps, st)
	}
	return p, nil
}

func isNameChar(c byte) bool {
	return c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// parseBracket parses the [...] at expr[i]: [*], ['key'], [n] or [a:b].
func parseBracket(src, expr string, i, off int) (jpStep, int, error) {
	end := strings.IndexByte(expr[i:], ']')
	if q := expr[min(i+1, len(expr)-1)]; q == '\'' || q == '"' {
		k := strings.IndexByte(expr[i+2:], q)
		if k < 0 {
			return jpStep{}, 0, jpError(src, off+i, "unclosed quote in [")
		}
		end = strings.IndexByte(expr[i+2+k:], ']')
		if end >= 0 {
			end += 2 + k
		}
	}
	if end < 0 {
		return jpStep{}, 0, jpError(src, off+i, "unclosed [")
	}
	in := expr[i+1 : i+end]
	next := i + end + 1
	switch {
	case in == "*":
		return jpStep{kind: jpAll}, next, nil
	case strings.HasPrefix(in, "?"):
		return jpStep{}, 0, jpError(src, off+i, "filters ([?(...)]) are not supported; use {range} and a script")
	case len(in) >= 2 && (in[0] == '\'' || in[0] == '"') && in[len(in)-1] == in[0]:
		return jpStep{kind: jpField, name: in[1 : len(in)-1]}, next, nil
	}
	if a, b, ok := strings.Cut(in, ":"); ok {
		st := jpStep{kind: jpSlice}
		for _, part := range []struct {
			s   string
			dst **int
		}{{a, &st.start}, {b, &st.end}} {
			if part.s == "" {
				continue
			}
			n, err := strconv.Atoi(strings.TrimSpace(part.s))
			if err != nil {
				return jpStep{}, 0, jpError(src, off+i, "slice [%s] wants whole numbers", in)
			}
			*part.dst = &n
		}
		return st, next, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(in))
	if err != nil {
		return jpStep{}, 0, jpError(src, off+i, "[%s] is not an index, a slice, * or a quoted key", in)
	}
	return jpStep{kind: jpIndex, index: n}, next, nil
}

// decodeJSONDoc decodes a JSON document keeping numbers as written.
func decodeJSONDoc(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// execute writes the template over the document doc to out.
func (t *jpTemplate) execute(out *bytes.Buffer, doc any) error {
	return t.run(out, t.nodes, doc, doc)
}

func (t *jpTemplate) run(out *bytes.Buffer, nodes []jpNode, root, cur any) error {
	for _, n := range nodes {
		switch {
		case n.isLit:
			out.WriteString(n.text)
		case n.path != nil:
			for k, v := range n.path.eval(root, cur) {
				if k > 0 {
					out.WriteByte(' ')
				}
				if err := writeJSONValue(out, v); err != nil {
					return err
				}
			}
		case n.rng != nil:
			vals := n.rng.eval(root, cur)
			if len(vals) == 1 && n.rng.single() {
				// {range .jobs}: the one value is the list to range over.
				if list, ok := vals[0].([]any); ok {
					vals = list
				}
			}
			for _, v := range vals {
				if err := t.run(out, *n.body, root, v); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// writeJSONValue prints one value: a string as it is, null as nothing,
// anything else as compact JSON.
func writeJSONValue(out *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case string:
		out.WriteString(v)
		return nil
	case nil:
		return nil
	case json.Number:
		out.WriteString(v.String())
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	out.Write(b)
	return nil
}

// single reports whether the path names one value (no *, slice or ..),
// so that a list it reaches is the thing to range over, not an element.
func (p *jpPath) single() bool {
	for _, st := range p.steps {
		if st.kind == jpAll || st.kind == jpSlice || st.kind == jpDescend {
			return false
		}
	}
	return true
}

// eval is every value the path reaches from cur (from root for $).
func (p *jpPath) eval(root, cur any) []any {
	vals := []any{cur}
	if p.root {
		vals = []any{root}
	}
	for _, st := range p.steps {
		var next []any
		for _, v := range vals {
			next = st.apply(v, next)
		}
		vals = next
	}
	return vals
}

// apply appends what step st reaches from v to out.
func (st jpStep) apply(v any, out []any) []any {
	switch st.kind {
	case jpField:
		if m, ok := v.(map[string]any); ok {
			if f, ok := m[st.name]; ok {
				out = append(out, f)
			}
		}
	case jpIndex:
		if l, ok := v.([]any); ok {
			i := st.index
			if i < 0 {
				i += len(l)
			}
			if i >= 0 && i < len(l) {
				out = append(out, l[i])
			}
		}
	case jpSlice:
		if l, ok := v.([]any); ok {
			out = append(out, l[sliceBound(st.start, 0, len(l)):max(sliceBound(st.start, 0, len(l)), sliceBound(st.end, len(l), len(l)))]...)
		}
	case jpAll:
		out = appendChildren(v, out)
	case jpDescend:
		out = descend(v, st.name, out)
	}
	return out
}

// sliceBound is a slice bound b (def when unset) clamped to [0, n], a
// negative one counted from the end.
func sliceBound(b *int, def, n int) int {
	if b == nil {
		return def
	}
	i := *b
	if i < 0 {
		i += n
	}
	return max(0, min(i, n))
}

// appendChildren appends v's elements, or its values in key order.
func appendChildren(v any, out []any) []any {
	switch v := v.(type) {
	case []any:
		out = append(out, v...)
	case map[string]any:
		for _, k := range sortedKeys(v) {
			out = append(out, v[k])
		}
	}
	return out
}

// descend appends the value of every field called name at any depth
// under v, in document order (keys sorted).
func descend(v any, name string, out []any) []any {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			out = descend(e, name, out)
		}
	case map[string]any:
		for _, k := range sortedKeys(v) {
			if k == name {
				out = append(out, v[k])
			}
			out = descend(v[k], name, out)
		}
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
