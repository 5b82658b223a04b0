package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/peloton-sched/peloton/hostmgr"
)

// ApplyPartition sets the LabelPartition label of the host's node, so that
// what the Node informer reports after a move agrees with hostmgr (and
// other tools see the partition too). A merge patch of one label is
// idempotent and leaves the node's other labels alone.
func (b *Backend) ApplyPartition(ctx context.Context, host, partition string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": map[string]string{LabelPartition: partition}}})
	err := b.call(ctx, func(ctx context.Context) error {
		_, err := b.client.CoreV1().Nodes().Patch(ctx, host, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("kubernetes: label node %s %s=%s: %w", host, LabelPartition, partition, err)
	}
	return nil
}

var _ hostmgr.PartitionApplier = (*Backend)(nil)
