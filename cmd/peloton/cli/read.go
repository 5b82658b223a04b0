package cli

import (
	"io"

	"google.golang.org/protobuf/proto"
)

// read is the body every list and get command shares, in this order: -o
// is checked (a typo costs no call), prepare reads the arguments and flags
// (nil: nothing to read; its error is the user's, given before any dial),
// dial connects (a.withClient or a.withFederation), fetch makes the call
// or calls, and show prints the answer. A command states only what it
// asks and how its answer looks.
func read[C, Resp any](a *app, dial func(func(C) error) error, prepare func() error,
	fetch func(c C) (Resp, error), show func(p *printer, resp Resp) error) error {
	p, err := a.printer()
	if err != nil {
		return err
	}
	if prepare != nil {
		if err := prepare(); err != nil {
			return err
		}
	}
	return dial(func(c C) error {
		resp, err := fetch(c)
		if err != nil {
			return err
		}
		return show(p, resp)
	})
}

// listed shows a List answer: items is its repeated field (field is that
// field's JSON name, kept in an empty list's document) and table writes
// them as rows.
func listed[Resp proto.Message, T any](field string, items func(Resp) []T,
	table func(w io.Writer, items []T, wide bool)) func(*printer, Resp) error {
	return func(p *printer, resp Resp) error {
		its := items(resp)
		return p.list(resp, field, len(its), func(w io.Writer, wide bool) { table(w, its, wide) })
	}
}

// checkLimit refuses a negative --limit (0 is "all").
func checkLimit(limit int) error {
	if limit < 0 {
		return usageErrorf("invalid --limit %d: must be >= 0", limit)
	}
	return nil
}
