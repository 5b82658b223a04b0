// Package fsm holds transition tables: the one place per lifecycle (task,
// job, update, host maintenance, partition move) that lists which state
// changes are legal. A table is data, so it can be checked, queried for the
// states that lead to a state (to tell an operator what a request needs) and
// rendered for a golden file that makes every change a reviewed diff.
//
// The one rule on self-transitions, for every table: staying in a state is
// not a transition and is always allowed (a write that changes other fields
// of a record). A caller for whom asking for the state a thing is already in
// is a mistake (draining a draining host) says so itself, before it asks the
// table.
//
// fsm imports nothing of Peloton; it must stay a leaf.
package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// State is a state of a lifecycle: a protobuf enum or any small integer type
// with a name.
type State interface {
	~int32
	String() string
}

// ErrIllegal is wrapped by every error Check returns.
var ErrIllegal = errors.New("illegal transition")

// Table lists the legal transitions of one lifecycle. It is immutable once
// built and safe for concurrent use.
type Table[S State] struct {
	name  string
	edges map[S][]S
	froms []S // every state with a row, in enum order
}

// Row is the states one state may become.
type Row[S State] struct {
	from S
	to   []S
}

// From starts a row: From(a).To(b, c) says a may become b or c.
func From[S State](s S) Row[S] { return Row[S]{from: s} }

// To lists where the row's state may go; none makes it a state that is
// never left.
func (r Row[S]) To(to ...S) Row[S] { r.to = to; return r }

// New builds the table named name (used in errors and renderings) from its
// rows. Every state of the lifecycle should have a row, even one with no
// targets, so a state missing from the table is a mistake a test can find
// (Has). A state listed twice, or a row that names its own state, is a
// programming error and panics: self-transitions are the package's rule, not
// a table's.
func New[S State](name string, rows ...Row[S]) *Table[S] {
	t := &Table[S]{name: name, edges: make(map[S][]S, len(rows))}
	for _, r := range rows {
		if _, dup := t.edges[r.from]; dup {
			panic(fmt.Sprintf("fsm: %s: state %s has two rows", name, r.from))
		}
		if slices.Contains(r.to, r.from) {
			panic(fmt.Sprintf("fsm: %s: row %s lists itself; staying is always allowed", name, r.from))
		}
		t.edges[r.from] = slices.Clone(r.to)
		t.froms = append(t.froms, r.from)
	}
	slices.Sort(t.froms)
	return t
}

// Name is the table's name.
func (t *Table[S]) Name() string { return t.name }

// Has reports whether s has a row.
func (t *Table[S]) Has(s S) bool { _, ok := t.edges[s]; return ok }

// Allowed reports whether from may become to: staying is always allowed,
// anything else must be in from's row.
func (t *Table[S]) Allowed(from, to S) bool {
	return from == to || slices.Contains(t.edges[from], to)
}

// Check returns nil when Allowed(from, to), else an error wrapping
// ErrIllegal that names the table and both states.
func (t *Table[S]) Check(from, to S) error {
	if t.Allowed(from, to) {
		return nil
	}
	return fmt.Errorf("%w: %s %s -> %s", ErrIllegal, t.name, from, to)
}

// Targets lists the states from may become, in the row's order.
func (t *Table[S]) Targets(from S) []S { return slices.Clone(t.edges[from]) }

// Sources lists, in enum order, the states that may become to (itself not
// included).
func (t *Table[S]) Sources(to S) []S {
	var out []S
	for _, f := range t.froms {
		if slices.Contains(t.edges[f], to) {
			out = append(out, f)
		}
	}
	return out
}

// Names renders states by name.
func Names[S State](ss []S) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.String()
	}
	return out
}

// Render prints the table for a golden file: a title line, then one line
// per state in enum order listing its targets in the row's order, "(none)"
// for a state that is never left.
func (t *Table[S]) Render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s transitions\n", t.name)
	for _, f := range t.froms {
		tos := Names(t.edges[f])
		if len(tos) == 0 {
			tos = []string{"(none)"}
		}
		fmt.Fprintf(&b, "%s -> %s\n", f, strings.Join(tos, " "))
	}
	return b.String()
}
