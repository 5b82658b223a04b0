package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"sigs.k8s.io/yaml"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// stdinName is how errors name a spec read from standard input ("-f -").
const stdinName = "stdin"

// loadJobSpec reads a JobSpec from path ("-" reads stdin).
func loadJobSpec(path string, stdin io.Reader) (*pelotonv1.JobSpec, error) {
	spec := &pelotonv1.JobSpec{}
	if err := loadSpec(path, stdin, spec); err != nil {
		return nil, err
	}
	return spec, nil
}

// loadPoolSpec reads a PoolSpec from path ("-" reads stdin).
func loadPoolSpec(path string, stdin io.Reader) (*pelotonv1.PoolSpec, error) {
	spec := &pelotonv1.PoolSpec{}
	if err := loadSpec(path, stdin, spec); err != nil {
		return nil, err
	}
	return spec, nil
}

func loadSpec(path string, stdin io.Reader, m proto.Message) error {
	name, data, err := readSpecFile(path, stdin)
	if err != nil {
		return err
	}
	return decodeSpec(name, data, m)
}

// readSpecFile reads a spec file ("-" reads stdin) and returns the name its
// errors go by with its bytes.
func readSpecFile(path string, stdin io.Reader) (string, []byte, error) {
	name, data := path, []byte(nil)
	var err error
	if path == "-" {
		name = stdinName
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return name, nil, fmt.Errorf("%s: %w", name, err)
	}
	return name, data, nil
}

// decodeSpec fills m from data, YAML or JSON that is the protobuf JSON
// mapping of m. Every error starts with name, the file it came from, and
// names the offending field; unknown fields are errors, because a misspelt
// field silently ignored would run something other than what was written.
func decodeSpec(name string, data []byte, m proto.Message) error {
	if err := checkYAML(data); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "error converting YAML to JSON: "))
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || string(js) == "null" {
		return fmt.Errorf("%s: file is empty", name)
	}
	if js[0] != '{' {
		return fmt.Errorf("%s: want a mapping of %s fields", name, m.ProtoReflect().Descriptor().Name())
	}

	// protojson reports an unknown field without saying where it is (and
	// with a position in the converted JSON, not in the user's YAML), so
	// look for unknown fields first and name their path.
	var doc any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	if err := checkFields("", doc, m.ProtoReflect().Descriptor()); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	// checkFields wrote enum values in their canonical case.
	if js, err = json.Marshal(doc); err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}

	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, m); err != nil {
		return fmt.Errorf("%s: %s", name, cleanProtoError(err))
	}
	return nil
}

// checkFields reports the first key of v (in sorted order, so the answer is
// stable) that names no field of md, recursing into messages, lists and maps
// of messages. It writes enum values given in another case in the case of
// their names (type: batch is BATCH), and refuses unknown ones listing the
// valid values. Values of the wrong type are left to protojson.
func checkFields(path string, v any, md protoreflect.MessageDescriptor) error {
	obj, ok := v.(map[string]any)
	if !ok || md.FullName().Parent() == "google.protobuf" {
		// Not an object, or a well-known type with its own JSON form.
		return nil
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fields := md.Fields()
	for _, k := range keys {
		fd := fields.ByJSONName(k)
		if fd == nil {
			// protojson accepts the proto name (instance_count) as well.
			fd = fields.ByName(protoreflect.Name(k))
		}
		if fd == nil {
			msg := fmt.Sprintf("unknown field %q", k)
			if s := suggestField(k, fields); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			if path != "" {
				msg = path + ": " + msg
			}
			return fmt.Errorf("%s", msg)
		}
		child := k
		if path != "" {
			child = path + "." + k
		}
		val := obj[k]
		var err error
		switch {
		case fd.IsMap():
			entries, ok := val.(map[string]any)
			if ed := fd.MapValue().Enum(); ed != nil && ok {
				for e, ev := range entries {
					if entries[e], err = enumValue(child+"["+e+"]", ev, ed); err != nil {
						return err
					}
				}
				continue
			}
			vd := fd.MapValue().Message()
			if vd == nil || !ok {
				continue
			}
			mk := make([]string, 0, len(entries))
			for e := range entries {
				mk = append(mk, e)
			}
			slices.Sort(mk)
			for _, e := range mk {
				if err := checkFields(child+"["+e+"]", entries[e], vd); err != nil {
					return err
				}
			}
		case fd.IsList():
			items, ok := val.([]any)
			if ed := fd.Enum(); ed != nil && ok {
				for i, item := range items {
					if items[i], err = enumValue(fmt.Sprintf("%s[%d]", child, i), item, ed); err != nil {
						return err
					}
				}
				continue
			}
			if fd.Message() == nil || !ok {
				continue
			}
			for i, item := range items {
				if err := checkFields(fmt.Sprintf("%s[%d]", child, i), item, fd.Message()); err != nil {
					return err
				}
			}
		case fd.Enum() != nil:
			if obj[k], err = enumValue(child, val, fd.Enum()); err != nil {
				return err
			}
		case fd.Message() != nil:
			if err := checkFields(child, val, fd.Message()); err != nil {
				return err
			}
		}
	}
	return nil
}

// enumValue is v, the value of an enum field at path, with the case of the
// value's name when it names one in another case. A value that names none
// is refused with the values there are (but the unspecified zero, which no
// spec means). Numbers and null are left to protojson.
func enumValue(path string, v any, ed protoreflect.EnumDescriptor) (any, error) {
	s, ok := v.(string)
	if !ok || ed.FullName().Parent() == "google.protobuf" || ed.Values().ByName(protoreflect.Name(s)) != nil {
		return v, nil
	}
	values := ed.Values()
	valid := make([]string, 0, values.Len())
	for i := range values.Len() {
		name := string(values.Get(i).Name())
		if values.Get(i).Number() == 0 && strings.HasSuffix(name, "_UNSPECIFIED") {
			continue
		}
		if strings.EqualFold(name, s) {
			return name, nil
		}
		valid = append(valid, name)
	}
	return nil, fmt.Errorf("%s: %q is not one of %s", path, s, strings.Join(valid, ", "))
}

// suggestField finds the field a misspelt key most likely meant: the
// closest JSON name, ignoring case, underscores and dashes, within two edits.
func suggestField(key string, fields protoreflect.FieldDescriptors) string {
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
	}
	want := norm(key)
	best, bestDist := "", 3
	for i := range fields.Len() {
		name := fields.Get(i).JSONName()
		if d := editDistance(norm(name), want); d < bestDist {
			best, bestDist = name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// protojson prefixes its errors with "proto:" (followed, on purpose, by a
// space or a non-breaking space at random) and a position in the JSON it
// was given, which is not the user's file.
var protoErrorNoise = regexp.MustCompile(`^proto:[\s\x{00a0}]*(\(line \d+:\d+\):[\s\x{00a0}]*)?`)

func cleanProtoError(err error) string {
	return protoErrorNoise.ReplaceAllString(err.Error(), "")
}
