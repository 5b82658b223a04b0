package store

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidTxn is returned (wrapped, with the offending op's index) for a Txn
// etcd would reject as a whole: no ops, too many ops, two ops on one key, an
// empty key, an unknown kind or an impossible ExpectRevision. Checking up front gives a message that names
// the op instead of etcd's generic gRPC error.
var ErrInvalidTxn = errors.New("store: invalid txn")

// ErrFenced is returned (wrapped) by Txn of a store with a Fence once the
// leadership the fence stands for has ended. Nothing was written. It is not
// an ErrConflict: retrying cannot help, only winning an election again can.
var ErrFenced = errors.New("store: not the leader any more; write refused")

// ConflictError is the ErrConflict returned by (*Etcd).Txn and
// (*Batcher).Write. It says which ops were stale, so the Batcher can fail
// exactly those and users get a message naming the key. Match it with
// errors.Is(err, ErrConflict); use errors.As only when you need the details.
type ConflictError struct {
	// Conflicts lists every op whose compare failed, in op order.
	Conflicts []Conflict
}

// Conflict describes one failed compare-and-swap.
type Conflict struct {
	// Index is the op's position in the Txn call (0 for a Batcher write).
	Index int
	// Key is the op's key, relative to the store prefix.
	Key string
	// Expected is the op's ExpectRevision (MustNotExist or a revision).
	Expected int64
	// Actual is the key's ModRevision when the compare ran; 0 if absent.
	Actual int64
}

// String is the one-line form used in error messages.
func (c Conflict) String() string {
	want := fmt.Sprintf("revision %d", c.Expected)
	if c.Expected == MustNotExist {
		want = "absent"
	}
	got := fmt.Sprintf("revision %d", c.Actual)
	if c.Actual == 0 {
		got = "absent"
	}
	return fmt.Sprintf("%s: expected %s, found %s", c.Key, want, got)
}

// Error lists the first few conflicts; a txn of hundreds of ops must not
// produce a message of hundreds of lines.
func (e *ConflictError) Error() string {
	const show = 3
	var b strings.Builder
	b.WriteString(ErrConflict.Error())
	for i, c := range e.Conflicts {
		if i == show {
			fmt.Fprintf(&b, "; and %d more", len(e.Conflicts)-show)
			break
		}
		b.WriteString("; ")
		b.WriteString(c.String())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrConflict) hold.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// validateOp checks one op on its own. The Batcher runs it before queueing so
// one malformed op cannot fail the batch it would have joined. The error text
// is a field path suffix (".key: ...").
func validateOp(op Op) error {
	if op.Key == "" {
		return errors.New(".key: must not be empty")
	}
	if op.Kind != OpPut && op.Kind != OpDelete {
		return fmt.Errorf(".kind: unknown OpKind %d", op.Kind)
	}
	if op.ExpectRevision < AnyRevision {
		return fmt.Errorf(".expectRevision: %d is not AnyRevision, MustNotExist or a revision", op.ExpectRevision)
	}
	return nil
}
