package store

import "fmt"

// ValidateTxn rejects, with an ErrInvalidTxn naming the op, a txn etcd
// would reject as a whole: no ops, more than maxTxnOps, two ops on one key,
// or an op validateOp refuses. Every Store implementation checks its ops
// with it, so that they refuse the same txns with the same words.
func ValidateTxn(ops []Op, maxTxnOps int) error {
	if len(ops) == 0 {
		return fmt.Errorf("%w: no ops", ErrInvalidTxn)
	}
	if len(ops) > maxTxnOps {
		return fmt.Errorf("%w: %d ops, more than max-txn-ops %d", ErrInvalidTxn, len(ops), maxTxnOps)
	}
	seen := make(map[string]int, len(ops))
	for i, op := range ops {
		if err := validateOp(op); err != nil {
			return fmt.Errorf("%w: ops[%d]%v", ErrInvalidTxn, i, err)
		}
		if j, dup := seen[op.Key]; dup {
			return fmt.Errorf("%w: ops[%d].key: %q already written by ops[%d]; etcd allows one write per key per txn", ErrInvalidTxn, i, op.Key, j)
		}
		seen[op.Key] = i
	}
	return nil
}
