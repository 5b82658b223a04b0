package paging

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		in   uint32
		want int
		err  string
	}{
		{in: 0, want: DefaultSize},
		{in: 1, want: 1},
		{in: MaxSize, want: MaxSize},
		{in: MaxSize + 1, err: "pageSize: at most 5000, got 5001"},
	} {
		got, err := Size(tc.in, "pageSize")
		if tc.err != "" {
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tc.err {
				t.Errorf("Size(%d) = %v, want InvalidArgument %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Size(%d) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestTokenRoundTrip(t *testing.T) {
	tok := Encode("jobs", "123", "a:b\x01")
	if strings.Contains(tok, "jobs") {
		t.Errorf("token %q is not opaque", tok)
	}
	got, err := Decode(tok, "pageToken", "jobs", 2)
	if err != nil || len(got) != 2 || got[0] != "123" || got[1] != "a:b\x01" {
		t.Fatalf("Decode = %q, %v", got, err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for name, tok := range map[string]string{
		"not base64":         "%%%",
		"another list's":     Encode("tasks", "1", "2"),
		"too few fields":     Encode("jobs", "1"),
		"too many fields":    Encode("jobs", "1", "2", "3"),
		"empty after a kind": Encode("jobs"),
	} {
		_, err := Decode(tok, "req.pageToken", "jobs", 2)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "req.pageToken: ") {
			t.Errorf("%s: %v, want InvalidArgument naming req.pageToken", name, err)
		}
	}
}

func TestMark(t *testing.T) {
	m := Mark{Nanos: 100, ID: "b"}
	tok := EncodeMark("jobs", m)
	got, err := DecodeMark(tok, "pageToken", "jobs")
	if err != nil || got != m {
		t.Fatalf("DecodeMark = %+v, %v; want %+v", got, err, m)
	}
	if _, err := DecodeMark(Encode("jobs", "x", "b"), "pageToken", "jobs"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a mark with a bad time: %v, want InvalidArgument", err)
	}
	// Newest first, ties by id: past the mark is older, or as old with a
	// greater id.
	for _, tc := range []struct {
		nanos int64
		id    string
		want  bool
	}{{99, "a", true}, {100, "c", true}, {100, "b", false}, {100, "a", false}, {101, "z", false}} {
		if got := m.Passed(tc.nanos, tc.id); got != tc.want {
			t.Errorf("Passed(%d, %q) = %v, want %v", tc.nanos, tc.id, got, tc.want)
		}
	}
}

func TestCut(t *testing.T) {
	items := []int{1, 2, 3, 4, 5, 6, 7}
	token := func(last int) string { return strconv.Itoa(last) }
	// Walk the whole list page by page: every item once, in order.
	var seen []int
	after := 0
	for pages := 0; ; pages++ {
		if pages > len(items) {
			t.Fatal("paging does not end")
		}
		page, next := Cut(items, 3, func(v int) bool { return v > after }, token, nil)
		seen = append(seen, page...)
		if next == "" {
			break
		}
		if len(page) != 3 {
			t.Fatalf("a page with a next token holds %d items, want 3", len(page))
		}
		after, _ = strconv.Atoi(next)
	}
	if !slices.Equal(seen, items) {
		t.Fatalf("paging saw %v, want %v", seen, items)
	}

	if page, next := Cut(items, 7, nil, token, nil); len(page) != 7 || next != "" {
		t.Errorf("an exact last page: %v %q, want all and no token", page, next)
	}
	if page, next := Cut(items, 3, func(v int) bool { return v > 9 }, token, nil); len(page) != 0 || next != "" {
		t.Errorf("past the end: %v %q, want nothing", page, next)
	}
	// A byte bound ends a page early, but a page always holds one item.
	weigh := func(v int) int { return v * 1000 }
	if page, next := Cut(items, 5, nil, token, func(v int) int { return weigh(v) * MaxBytes / 2500 }); len(page) != 1 || next != "1" {
		t.Errorf("byte bound: %v %q, want [1] and token 1", page, next)
	}
	if page, _ := Cut(items, 5, nil, token, func(int) int { return MaxBytes + 1 }); len(page) != 1 {
		t.Errorf("an item above the bound alone: %v, want one item", page)
	}
}
