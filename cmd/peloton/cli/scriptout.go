package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The scripting formats of -o: name (kind/id per line), jsonpath=TEMPLATE
// and custom-columns=HEADER:PATH,... (or custom-columns-file=FILE). Each
// works on the same JSON -o json prints, so a field a script reads has one
// name whichever format it uses.
const (
	formatName          = "name"
	formatJSONPath      = "jsonpath"
	formatColumns       = "custom-columns"
	formatColumnsFile   = "custom-columns-file"
	validOutputFormats  = "table, wide, json, yaml, name, jsonpath=TEMPLATE, custom-columns=HEADER:PATH,... or custom-columns-file=FILE"
	missingColumnMarker = "<none>"
)

// outputValues are the values of -o, for completion.
var outputValues = []string{
	formatTable, formatWide, formatJSON, formatYAML, formatName,
	formatJSONPath + "=", formatColumns + "=", formatColumnsFile + "=",
}

// column is one column of -o custom-columns: its header and the path of
// its value in each row's JSON.
type column struct {
	header string
	path   *jpPath
}

// parseOutput reads the value of -o into a printer writing to w.
func parseOutput(w io.Writer, value string, noHeaders bool) (*printer, error) {
	p := &printer{w: w, noHeaders: noHeaders}
	name, arg, hasArg := strings.Cut(value, "=")
	switch f := strings.ToLower(name); f {
	case formatTable, formatWide, formatJSON, formatYAML, formatName:
		if hasArg {
			return nil, usageErrorf("invalid --output %q: %s takes no =VALUE; want %s", value, f, validOutputFormats)
		}
		p.format = f
		return p, nil
	case formatJSONPath:
		if arg == "" {
			return nil, usageErrorf("invalid --output %q: jsonpath wants a template, e.g. -o jsonpath='{.id}'", value)
		}
		t, err := parseJSONPath(arg)
		if err != nil {
			return nil, err
		}
		p.format, p.jsonpath = f, t
		return p, nil
	case formatColumns, formatColumnsFile:
		spec := arg
		if f == formatColumnsFile {
			b, err := os.ReadFile(arg)
			if err != nil {
				return nil, usageErrorf("invalid --output %q: %v", value, err)
			}
			if spec, err = columnsFromFile(arg, string(b)); err != nil {
				return nil, err
			}
		}
		cols, err := parseColumns(spec)
		if err != nil {
			return nil, err
		}
		p.format, p.columns = formatColumns, cols
		return p, nil
	}
	return nil, usageErrorf("invalid --output %q: want %s", value, validOutputFormats)
}

// parseColumns reads HEADER:PATH,HEADER2:PATH2. A path may be written
// bare (.spec.name) or in braces ({.spec.name}).
func parseColumns(spec string) ([]column, error) {
	if spec == "" {
		return nil, usageErrorf("invalid --output custom-columns: want HEADER:PATH,..., e.g. -o custom-columns=ID:.id,NAME:.spec.name")
	}
	var cols []column
	for _, part := range strings.Split(spec, ",") {
		header, path, ok := strings.Cut(part, ":")
		if !ok || header == "" || path == "" {
			return nil, usageErrorf("invalid --output custom-columns column %q: want HEADER:PATH, e.g. NAME:.spec.name", part)
		}
		path = strings.TrimSpace(path)
		if strings.HasPrefix(path, "{") && strings.HasSuffix(path, "}") {
			path = path[1 : len(path)-1]
		}
		p, err := parsePath(path, path, 0)
		if err != nil {
			return nil, usageErrorf("invalid --output custom-columns column %q: %v", part, err)
		}
		cols = append(cols, column{header: header, path: p})
	}
	return cols, nil
}

// columnsFromFile reads a custom-columns file: a line of headers and a
// line of paths, separated by blanks, as kubectl's.
func columnsFromFile(file, text string) (string, error) {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 {
		return "", usageErrorf("invalid --output custom-columns-file %s: want two lines, the headers and their paths", file)
	}
	heads, paths := strings.Fields(lines[0]), strings.Fields(lines[1])
	if len(heads) != len(paths) {
		return "", usageErrorf("invalid --output custom-columns-file %s: %d headers but %d paths", file, len(heads), len(paths))
	}
	parts := make([]string, len(heads))
	for i := range heads {
		parts[i] = heads[i] + ":" + paths[i]
	}
	return strings.Join(parts, ","), nil
}

// scripting reports whether -o is one of the scripting formats.
func (p *printer) scripting() bool {
	return p.format == formatName || p.format == formatJSONPath || p.format == formatColumns
}

// emit writes the JSON document b in a document format. md is the
// message b is the JSON of (nil when it is no message), and field the
// JSON name of its list of items when it is a List answer ("" when not).
func (p *printer) emit(b []byte, md protoreflect.MessageDescriptor, field string) error {
	switch p.format {
	case formatJSON, formatYAML:
		return p.document(b)
	}
	if field == "" && md != nil && strings.HasSuffix(string(md.Name()), "Response") {
		// A List answer printed whole (host list, with its substrate):
		// its rows are its one list of objects.
		field = listField(md)
	}
	doc, err := decodeJSONDoc(b)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	switch p.format {
	case formatJSONPath:
		if err := p.jsonpath.execute(&out, doc); err != nil {
			return err
		}
	case formatColumns:
		p.writeColumns(&out, rowsOf(doc, field))
	case formatName:
		if err := writeNames(&out, doc, md, field); err != nil {
			return err
		}
	}
	_, err = p.w.Write(out.Bytes())
	return err
}

// rowsOf is the rows of a document: the items of its list field, or the
// document itself.
func rowsOf(doc any, field string) []any {
	if field == "" {
		return []any{doc}
	}
	m, _ := doc.(map[string]any)
	items, _ := m[field].([]any)
	return items
}

// writeColumns writes rows as a table of the -o custom-columns columns.
func (p *printer) writeColumns(out *bytes.Buffer, rows []any) {
	tw := newTabWriter(out)
	if !p.noHeaders {
		head := make([]string, len(p.columns))
		for i, c := range p.columns {
			head[i] = c.header
		}
		row(tw, head...)
	}
	for _, r := range rows {
		cells := make([]string, len(p.columns))
		for i, c := range p.columns {
			vals := c.path.eval(r, r)
			parts := make([]string, 0, len(vals))
			for _, v := range vals {
				var b bytes.Buffer
				_ = writeJSONValue(&b, v)
				parts = append(parts, b.String())
			}
			cells[i] = strings.Join(parts, ",")
			if len(vals) == 0 {
				cells[i] = missingColumnMarker
			}
		}
		row(tw, cells...)
	}
	_ = tw.Flush()
}

// kinds names the objects -o name prints, by message: the noun of the
// command that shows one.
var kinds = map[protoreflect.Name]string{
	"Job": "job", "Task": "task", "Pool": "pool", "Host": "host", "Update": "update",
	"Partition": "partition", "PartitionMove": "partitionmove", "JobVersion": "jobversion",
	"Cluster": "cluster", "FederatedJob": "fedjob", "FederatedService": "fedservice",
	"FederatedPool": "fedpool",
}

// nameKeys are the fields that name an object, the first present wins.
var nameKeys = []string{"id", "path", "name", "host", "version"}

// writeNames writes kind/name of each object of doc: the items of its
// list field (or of a List answer's one list of objects), or doc itself.
func writeNames(out *bytes.Buffer, doc any, md protoreflect.MessageDescriptor, field string) error {
	if md == nil {
		return usageErrorf("invalid --output name: this command prints no named objects; use -o json or -o jsonpath")
	}
	items := []any{doc}
	if field != "" {
		fd := md.Fields().ByJSONName(field)
		if fd == nil || fd.Message() == nil {
			return usageErrorf("invalid --output name: %s holds no list of objects", md.Name())
		}
		md, items = fd.Message(), rowsOf(doc, field)
	}
	kind, ok := kinds[md.Name()]
	if !ok {
		return usageErrorf("invalid --output name: a %s has no name; use -o json or -o jsonpath", md.Name())
	}
	for _, it := range items {
		m, _ := it.(map[string]any)
		id := ""
		if kind == "task" {
			// What task get and task logs take: the job and the instance.
			fmt.Fprintf(out, "task/%v/%v\n", m["jobId"], m["instanceId"])
			continue
		}
		for _, k := range nameKeys {
			if v, ok := m[k]; ok && v != nil && fmt.Sprint(v) != "" {
				id = fmt.Sprint(v)
				break
			}
		}
		fmt.Fprintf(out, "%s/%s\n", kind, id)
	}
	return nil
}

// listField is the JSON name of the one repeated message field of a
// response, or "" when it has none or several.
func listField(md protoreflect.MessageDescriptor) string {
	found := ""
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.IsList() && fd.Message() != nil {
			if found != "" {
				return ""
			}
			found = fd.JSONName()
		}
	}
	return found
}

// headless drops a table's header row, for --no-headers: the first line,
// when it is one. Header rows are in capitals (NAME, STATE); the
// field-per-line views of a single object (cluster get, fed pool get)
// start with a lower-case "name:", which is kept.
type headless struct {
	w     io.Writer
	first []byte
	done  bool
}

func (h *headless) Write(b []byte) (int, error) {
	if h.done {
		return h.w.Write(b)
	}
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		h.first = append(h.first, b...)
		return len(b), nil
	}
	h.done = true
	line := append(h.first, b[:i+1]...)
	rest := b[i+1:]
	if bytes.ContainsFunc(line, unicode.IsLower) {
		rest = append(line, rest...)
	}
	if _, err := h.w.Write(rest); err != nil {
		return 0, err
	}
	return len(b), nil
}

// named prints m, the answer of a change to the object kind/id that does
// not name it (job scale's): kind/id for -o name, else as object does.
func (p *printer) named(kind, id string, m proto.Message) error {
	if p.format == formatName {
		_, err := fmt.Fprintf(p.w, "%s/%s\n", kind, id)
		return err
	}
	return p.object(m, nil)
}

// deletedDoc is the document of a deleted object, {"deleted": true, key: id}.
func deletedDoc(key, id string) ([]byte, error) {
	return json.Marshal(map[string]any{key: id, "deleted": true})
}
