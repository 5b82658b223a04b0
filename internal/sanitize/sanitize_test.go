package sanitize

import (
	"reflect"
	"strings"
	"testing"
	"testing/quick"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"valid and short", "exit status 3", 64, "exit status 3"},
		{"empty", "", 8, ""},
		{"one bad byte", "ok\xffok", 64, "ok\uFFFDok"},
		{"a run of bad bytes is one replacement", "a\xff\xfe\xfdb", 64, "a\uFFFDb"},
		{"a cut rune at the end", "h\xc3", 64, "h\uFFFD"},
		{"cut, marked", "abcdefghij", 8, "abcde…"},
		{"cut on a rune boundary", "aé€😀", 8, "aé…"},
		{"a bound too small for the mark", "abcdef", 2, "ab"},
		{"a bound too small for a rune", "€€", 2, ""},
		{"no room", "abc", 0, ""},
		{"negative bound", "abc", -1, ""},
		{"exactly the bound", "abcd", 4, "abcd"},
	} {
		got := Text(tc.in, tc.max)
		if got != tc.want {
			t.Errorf("%s: Text(%q, %d) = %q, want %q", tc.name, tc.in, tc.max, got, tc.want)
		}
	}
}

// TestTextProperties: whatever the input, the result is valid UTF-8 within
// the bound, and valid input within the bound comes back as it was.
func TestTextProperties(t *testing.T) {
	f := func(b []byte, n uint16) bool {
		s, max := string(b), int(n%300)
		got := Text(s, max)
		if !utf8.ValidString(got) || len(got) > max {
			return false
		}
		if utf8.ValidString(s) && len(s) <= max {
			return got == s
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

func TestTextDoesNotCopyCleanText(t *testing.T) {
	s := strings.Repeat("x", 100)
	if n := testing.AllocsPerRun(100, func() { _ = Text(s, 200) }); n != 0 {
		t.Fatalf("Text of clean text allocates %v times", n)
	}
}

func TestLabels(t *testing.T) {
	clean := map[string]string{"zone": "a", "rack": "r1"}
	if got := Labels(clean); reflect.ValueOf(got).Pointer() != reflect.ValueOf(clean).Pointer() {
		t.Fatalf("Labels of clean labels made a copy: %v", got)
	}
	if Labels(nil) != nil {
		t.Fatal("Labels(nil) is not nil")
	}
	got := Labels(map[string]string{"zo\xffne": "a\xfe", "ok": strings.Repeat("v", MaxLabelValue+10)})
	if got["zo\uFFFDne"] != "a\uFFFD" {
		t.Errorf("bad key and value: %q", got)
	}
	if v := got["ok"]; len(v) > MaxLabelValue || !strings.HasSuffix(v, "…") {
		t.Errorf("long value: %d bytes", len(v))
	}
	// Two keys that clean to the same one: the first in key order wins,
	// so the answer does not depend on map order.
	for i := 0; i < 20; i++ {
		got := Labels(map[string]string{"k\xff": "1", "k\xfe": "2"})
		if len(got) != 1 || got["k\uFFFD"] != "2" {
			t.Fatalf("colliding keys: %q", got)
		}
	}
}
