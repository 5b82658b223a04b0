package cli

import (
	_ "embed"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// apiDoc is the descriptor set of proto/peloton/api/v1/peloton.proto with
// its comments (source info), which the generated Go code leaves out.
// `make proto` writes it next to this file; TestExplainDescriptorsMatchAPI
// fails when it is older than the generated code.
//
//go:embed apidoc.binpb
var apiDoc []byte

// apiPackage is the proto package `explain` documents.
const apiPackage = "peloton.api.v1"

var (
	apiFilesOnce sync.Once
	apiFiles     *protoregistry.Files
	apiFilesErr  error
)

// loadAPIDoc parses apiDoc once.
func loadAPIDoc() (*protoregistry.Files, error) {
	apiFilesOnce.Do(func() {
		var set descriptorpb.FileDescriptorSet
		if err := proto.Unmarshal(apiDoc, &set); err != nil {
			apiFilesErr = fmt.Errorf("the embedded API documentation is corrupt: %w", err)
			return
		}
		apiFiles, apiFilesErr = protodesc.NewFiles(&set)
	})
	return apiFiles, apiFilesErr
}

func (a *app) explainCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "explain TYPE[.FIELD...]",
		Short: "Show the documentation of an API message, enum or field",
		Long: `Show the documentation of a message or enum of the Peloton API, or of a field
reached from one by a path of field names (as in YAML, e.g. defaultSpec, or
as in the proto, default_spec): its type and comment, a message's fields with
the first line of each one's comment, an enum's values. Names are matched
without regard to case; a name that matches nothing is refused with the
closest ones.`,
		Example: `  peloton explain JobSpec
  peloton explain JobSpec.sla
  peloton explain JobSpec.defaultSpec.healthCheck.http.port
  peloton explain JobType`,
		Args: argsNamed("TYPE[.FIELD...]"),
		RunE: func(_ *cobra.Command, args []string) error {
			files, err := loadAPIDoc()
			if err != nil {
				return err
			}
			return explain(a.stdout, files, args[0])
		},
	}
}

// explain writes the documentation of what path names.
func explain(w io.Writer, files *protoregistry.Files, path string) error {
	parts := strings.Split(strings.TrimPrefix(path, apiPackage+"."), ".")
	d, err := findAPIType(files, parts[0])
	if err != nil {
		return err
	}
	var field protoreflect.FieldDescriptor
	walked := d.Name()
	for _, name := range parts[1:] {
		md, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			what := "enum"
			if d == nil {
				what = typeName(field)
			}
			return usageErrorf("%s is %s, which has no fields; %q names nothing", walked, what, name)
		}
		field = findField(md, name)
		if field == nil {
			return usageErrorf("%s has no field %q%s", walked, name, closeList(name, fieldNames(md)))
		}
		walked += protoreflect.Name("." + field.JSONName())
		d = elemType(field) // nil for a scalar
	}
	if field != nil {
		fmt.Fprintf(w, "FIELD: %s\nTYPE:  %s\n", walked, typeName(field))
		writeComment(w, field, "")
		if d == nil {
			return nil
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%s: %s\n", strings.ToUpper(kindOf(d)), d.Name())
	writeComment(w, d, "")
	switch t := d.(type) {
	case protoreflect.MessageDescriptor:
		writeFields(w, t)
	case protoreflect.EnumDescriptor:
		writeValues(w, t)
	}
	return nil
}

// findAPIType finds the message or enum of the API named name (short or
// full name, any case).
func findAPIType(files *protoregistry.Files, name string) (protoreflect.Descriptor, error) {
	want := strings.TrimPrefix(strings.ToLower(name), apiPackage+".")
	var found protoreflect.Descriptor
	var names []string
	files.RangeFilesByPackage(apiPackage, func(f protoreflect.FileDescriptor) bool {
		visitTypes(f.Messages(), f.Enums(), func(d protoreflect.Descriptor) {
			rel := strings.TrimPrefix(string(d.FullName()), apiPackage+".")
			names = append(names, rel)
			if strings.ToLower(rel) == want {
				found = d
			}
		})
		return true
	})
	if found == nil {
		return nil, usageErrorf("no message or enum %q in the API%s", name, closeList(name, names))
	}
	return found, nil
}

// visitTypes calls fn with every message and enum, nested ones included.
func visitTypes(ms protoreflect.MessageDescriptors, es protoreflect.EnumDescriptors, fn func(protoreflect.Descriptor)) {
	for i := 0; i < es.Len(); i++ {
		fn(es.Get(i))
	}
	for i := 0; i < ms.Len(); i++ {
		m := ms.Get(i)
		if m.IsMapEntry() {
			continue
		}
		fn(m)
		visitTypes(m.Messages(), m.Enums(), fn)
	}
}

// findField finds md's field by its JSON or proto name, any case.
func findField(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	fs := md.Fields()
	for i := 0; i < fs.Len(); i++ {
		f := fs.Get(i)
		if strings.EqualFold(f.JSONName(), name) || strings.EqualFold(string(f.Name()), name) {
			return f
		}
	}
	return nil
}

func fieldNames(md protoreflect.MessageDescriptor) []string {
	fs := md.Fields()
	names := make([]string, 0, fs.Len())
	for i := 0; i < fs.Len(); i++ {
		names = append(names, fs.Get(i).JSONName())
	}
	return names
}

// elemType is the message or enum a field holds (a map's value's), or nil
// for a scalar.
func elemType(f protoreflect.FieldDescriptor) protoreflect.Descriptor {
	if f.IsMap() {
		f = f.MapValue()
	}
	switch {
	case f.Message() != nil:
		return f.Message()
	case f.Enum() != nil:
		return f.Enum()
	}
	return nil
}

// typeName is a field's type as the proto writes it.
func typeName(f protoreflect.FieldDescriptor) string {
	if f.IsMap() {
		return fmt.Sprintf("map<%s, %s>", typeName(f.MapKey()), typeName(f.MapValue()))
	}
	var t string
	switch {
	case f.Message() != nil:
		t = shortName(f.Message())
	case f.Enum() != nil:
		t = shortName(f.Enum())
	default:
		t = f.Kind().String()
	}
	if f.IsList() {
		return "repeated " + t
	}
	return t
}

// shortName is d's name relative to the API's package.
func shortName(d protoreflect.Descriptor) string {
	return strings.TrimPrefix(string(d.FullName()), apiPackage+".")
}

func kindOf(d protoreflect.Descriptor) string {
	if _, ok := d.(protoreflect.EnumDescriptor); ok {
		return "enum"
	}
	return "message"
}

// comment is d's leading comment, trimmed, one string per line.
func comment(d protoreflect.Descriptor) []string {
	loc := d.ParentFile().SourceLocations().ByDescriptor(d)
	c := strings.TrimSpace(loc.LeadingComments)
	if c == "" {
		return nil
	}
	lines := strings.Split(c, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, " ")
	}
	return lines
}

func writeComment(w io.Writer, d protoreflect.Descriptor, indent string) {
	lines := comment(d)
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, l := range lines {
		fmt.Fprintf(w, "%s%s\n", indent, l)
	}
}

// firstLine is the first sentence of d's comment, on one line.
func firstLine(d protoreflect.Descriptor) string {
	c := strings.Join(comment(d), " ")
	for i := 0; i+1 < len(c); i++ {
		if c[i] != '.' || c[i+1] != ' ' {
			continue
		}
		if w := c[strings.LastIndexByte(c[:i], ' ')+1 : i+1]; w != "e.g." && w != "i.e." {
			return c[:i+1]
		}
	}
	return c
}

// table writes rows of tab-separated cells aligned, without trailing
// blanks.
func table(w io.Writer, rows [][]string) {
	var b strings.Builder
	tw := newTabWriter(&b)
	for _, r := range rows {
		fmt.Fprintln(tw, "  "+strings.Join(r, "\t"))
	}
	_ = tw.Flush()
	for _, l := range strings.SplitAfter(b.String(), "\n") {
		fmt.Fprint(w, strings.TrimRight(l, " \t\n"), strings.Repeat("\n", strings.Count(l, "\n")))
	}
}

func writeFields(w io.Writer, md protoreflect.MessageDescriptor) {
	fs := md.Fields()
	if fs.Len() == 0 {
		return
	}
	fmt.Fprintln(w, "\nFIELDS:")
	rows := make([][]string, 0, fs.Len())
	for i := 0; i < fs.Len(); i++ {
		f := fs.Get(i)
		rows = append(rows, []string{f.JSONName(), typeName(f), firstLine(f)})
	}
	table(w, rows)
}

func writeValues(w io.Writer, ed protoreflect.EnumDescriptor) {
	vs := ed.Values()
	fmt.Fprintln(w, "\nVALUES:")
	rows := make([][]string, 0, vs.Len())
	for i := 0; i < vs.Len(); i++ {
		v := vs.Get(i)
		rows = append(rows, []string{string(v.Name()), firstLine(v)})
	}
	table(w, rows)
}

// closeList is ": did you mean A, B?" naming the names closest to name,
// or "" when none is close.
func closeList(name string, names []string) string {
	type scored struct {
		name string
		dist int
	}
	low := strings.ToLower(name)
	var close []scored
	for _, n := range names {
		ln := strings.ToLower(n)
		d := editDistance(low, ln)
		if strings.Contains(ln, low) {
			d = min(d, 2)
		}
		if d <= max(2, len(name)/3) {
			close = append(close, scored{n, d})
		}
	}
	if len(close) == 0 {
		return ""
	}
	sort.SliceStable(close, func(i, j int) bool {
		if close[i].dist != close[j].dist {
			return close[i].dist < close[j].dist
		}
		return close[i].name < close[j].name
	})
	var out []string
	for i := 0; i < len(close) && i < 5; i++ {
		out = append(out, close[i].name)
	}
	return "; did you mean " + strings.Join(out, ", ") + "?"
}
