package cli

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzJSONPath feeds any template to the -o jsonpath parser and runs what
// parses over a document: it never panics, and a template it refuses is
// named in the error.
func FuzzJSONPath(f *testing.F) {
	for _, s := range []string{
		"", "{", "}", "{}", "{.}", "{$}", "{@}", "{.a}", "{.a[", "{.a[0", "{.a['", `{.a["x"]}`, "{.a[-9]}",
		"{.a[1:]}", "{.a[:-1]}", "{.a[x:y]}", "{..}", "{..a}", "{.*}", "{.a.*}", "{range .a}{end}",
		"{range}", "{end}", `{"\n"}`, `{"}`, "{range .a[*]}{.b}{range .c}{.}{end}{end}",
		"{.a[?(@.b)]}", "{.a['b.c']}", "x{.a}y",
	} {
		f.Add(s)
	}
	doc, err := decodeJSONDoc([]byte(`{"a":[{"b":1,"c":[1,2]},{"b":"x","c":{"d":null}}],"b.c":true}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, tmpl string) {
		p, err := parseJSONPath(tmpl)
		if err != nil {
			if !strings.Contains(err.Error(), "invalid jsonpath template") {
				t.Fatalf("%q: error %q does not name the template", tmpl, err)
			}
			return
		}
		var out bytes.Buffer
		if err := p.execute(&out, doc); err != nil {
			t.Fatalf("%q: %v", tmpl, err)
		}
	})
}
