package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/peloton-sched/peloton/internal/store"
)

// Before clusters had names, the stack kept its keys right under
// store.DefaultPrefix ("/peloton/jobs/...") and elected its leader on
// "/peloton/leader/cluster/". That data is the default cluster's: the first
// start of a cluster named DefaultClusterName moves it under its prefix, in
// transactions that move a batch of keys each and so can be cut short and
// resumed at any point (store.MoveKeys), before any part of the stack reads
// it. A start with nothing left to move writes nothing. While a replica of
// the old version still campaigns, the start waits.

// legacyDirs are the directories the stack wrote under store.DefaultPrefix
// before clusters had names. The list is closed: no version writes there
// any more, so nothing another service keeps under /peloton/ is moved.
var legacyDirs = []string{"pools/", "jobs/", "tasks/", "updates/", "hosts/"}

// legacyLeaderKey is where an older version's replicas campaign. While one
// of them lives it may write the old keys, so nothing moves then.
const legacyLeaderKey = store.DefaultPrefix + LeaderKey + "/"

// legacyRetry is how often a start blocked by an old replica looks again.
const legacyRetry = 2 * time.Second

// migrateLegacy moves the old un-prefixed keys into the default cluster's
// prefix, waiting until ctx ends while an old replica campaigns; for any
// other cluster it only warns that they exist.
func migrateLegacy(ctx context.Context, cli *clientv3.Client, cfg Config, maxTxnOps int, log *slog.Logger) error {
	if cfg.ClusterName != DefaultClusterName {
		for _, dir := range legacyDirs {
			resp, err := cli.Get(ctx, store.DefaultPrefix+dir, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return fmt.Errorf("look for keys of the unnamed cluster: %w", err)
			}
			if resp.Count > 0 {
				log.Warn("etcd holds data of a cluster from before clusters had names; it belongs to the cluster named "+DefaultClusterName+", which moves it under its own prefix when it starts, and this cluster does not see it",
					"keys", store.DefaultPrefix+dir, "cluster", cfg.ClusterName)
				break
			}
		}
		return nil
	}
	moved := 0
	for waited := false; ; waited = true {
		n, err := store.MoveKeys(ctx, cli, store.Move{From: store.DefaultPrefix, To: cfg.Prefix(), Dirs: legacyDirs,
			Unless: legacyLeaderKey, MaxTxnOps: maxTxnOps})
		moved += n
		if err != nil && !errors.Is(err, store.ErrMoveBlocked) {
			return fmt.Errorf("move the keys of the unnamed cluster under %s: %w", cfg.Prefix(), err)
		}
		if err == nil {
			break
		}
		// In a rolling upgrade the old replicas stop only once the new
		// ones are ready, which a follower's /healthz says they are while
		// this waits; so wait, rather than fail and stall the rollout.
		if !waited {
			log.Warn("a replica of an older Peloton still campaigns for this cluster; its data moves under this cluster's prefix, and this stack starts, once every old replica has stopped",
				"oldLeaderKey", legacyLeaderKey)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(legacyRetry):
		}
	}
	if moved > 0 {
		log.Info("moved the data of the unnamed cluster under this cluster's prefix", "keys", moved, "from", store.DefaultPrefix, "to", cfg.Prefix())
	}
	return nil
}
