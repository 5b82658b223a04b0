// Package paging is how Peloton's List calls page: a page size with a
// default and a bound, opaque page tokens that name the field on a bad
// token, and the cut of a sorted list into one page and the token of the
// next. A token records where the last page stopped (not an offset), so a
// list that changes between pages neither repeats nor skips what stayed.
//
// It imports nothing of Peloton but apierr.
package paging

import (
	"encoding/base64"
	"sort"
	"strconv"
	"strings"

	"github.com/peloton-sched/peloton/internal/apierr"
)

// Page sizes. A page also ends before it would pass MaxBytes (when the
// caller weighs its items), so that no answer nears gRPC's 4 MiB default
// whatever the items hold.
const (
	DefaultSize = 500
	MaxSize     = 5000
	MaxBytes    = 2 << 20
)

// Size checks a requested page size; 0 is DefaultSize. field names the
// request's field in the error.
func Size(n uint32, field string) (int, error) {
	switch {
	case n == 0:
		return DefaultSize, nil
	case n > MaxSize:
		return 0, apierr.Invalid(field, "at most %d, got %d", MaxSize, n)
	}
	return int(n), nil
}

// Encode makes an opaque token of fields for the list kind names, so that
// a token of one list is refused by another.
func Encode(kind string, fields ...string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strings.Join(append([]string{kind}, fields...), "\x00")))
}

// Decode returns the n fields of a token Encode made for kind, or an
// InvalidArgument naming field.
func Decode(token, field, kind string, n int) ([]string, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	parts := strings.Split(string(b), "\x00")
	if err != nil || len(parts) != n+1 || parts[0] != kind {
		return nil, badToken(field)
	}
	return parts[1:], nil
}

func badToken(field string) error {
	return apierr.Invalid(field, "not a token this list returned; pass next_page_token of the previous page, or nothing for the first")
}

// Mark is where a page of a newest-first list stopped: the creation time
// (Unix nanoseconds) and id of its last item. Such lists order by creation
// time descending, ties by id ascending.
type Mark struct {
	Nanos int64
	ID    string
}

// Passed reports whether the item created at nanos with id comes after m
// in a newest-first list, i.e. belongs to a later page.
func (m Mark) Passed(nanos int64, id string) bool {
	return nanos < m.Nanos || nanos == m.Nanos && id > m.ID
}

// EncodeMark is the token of a page that stopped at m.
func EncodeMark(kind string, m Mark) string {
	return Encode(kind, strconv.FormatInt(m.Nanos, 10), m.ID)
}

// DecodeMark reads a token EncodeMark made for kind, or returns an
// InvalidArgument naming field.
func DecodeMark(token, field, kind string) (Mark, error) {
	parts, err := Decode(token, field, kind, 2)
	if err != nil {
		return Mark{}, err
	}
	nanos, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return Mark{}, badToken(field)
	}
	return Mark{Nanos: nanos, ID: parts[1]}, nil
}

// Cut returns one page of sorted (in list order): the first size items
// for which past holds (past is false then true along sorted; nil: from
// the start), ended early before the items' weights (weigh; nil: none)
// would pass MaxBytes, though never empty while items are left. next is
// token of the page's last item when items are left after it, else "".
func Cut[T any](sorted []T, size int, past func(T) bool, token func(last T) string, weigh func(T) int) (page []T, next string) {
	start := 0
	if past != nil {
		start = sort.Search(len(sorted), func(i int) bool { return past(sorted[i]) })
	}
	end, bytes := start, 0
	for end < len(sorted) && end-start < size {
		if weigh != nil {
			w := weigh(sorted[end])
			if end > start && bytes+w > MaxBytes {
				break
			}
			bytes += w
		}
		end++
	}
	page = sorted[start:end]
	if end < len(sorted) && end > start {
		next = token(sorted[end-1])
	}
	return page, next
}
