package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/peloton-sched/peloton/internal/store"
)

// Before clusters had names, the stack kept its keys right under
// store.DefaultPrefix ("/peloton/jobs/...") and elected its leader on
// "/peloton/leader/cluster/". That data is the default cluster's: the first
// start of a cluster named DefaultClusterName moves it under its prefix, in
// transactions that move a batch of keys each and so can be cut short and
// resumed at any point (store.MoveKeys), before any part of the stack reads
// it. A start with nothing left to move writes nothing.

// legacyDirs are the directories the stack wrote under store.DefaultPrefix
// before clusters had names. The list is closed: no version writes there
// any more, so nothing another service keeps under /peloton/ is moved.
var legacyDirs = []string{"pools/", "jobs/", "tasks/", "updates/", "hosts/"}

// legacyLeaderKey is where an older version's replicas campaign. While one
// of them lives it may write the old keys, so nothing moves then.
const legacyLeaderKey = store.DefaultPrefix + LeaderKey + "/"

// migrateLegacy moves the old un-prefixed keys into the default cluster's
// prefix; for any other cluster it only warns that they exist.
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
	n, err := store.MoveKeys(ctx, cli, store.Move{From: store.DefaultPrefix, To: cfg.Prefix(), Dirs: legacyDirs,
		Unless: legacyLeaderKey, MaxTxnOps: maxTxnOps})
	if errors.Is(err, store.ErrMoveBlocked) {
		return fmt.Errorf("a replica of an older Peloton still campaigns for this cluster (a key under %s exists); stop every old replica, then start this version: %w", legacyLeaderKey, err)
	}
	if err != nil {
		return fmt.Errorf("move the keys of the unnamed cluster under %s: %w", cfg.Prefix(), err)
	}
	if n > 0 {
		log.Info("moved the data of the unnamed cluster under this cluster's prefix", "keys", n, "from", store.DefaultPrefix, "to", cfg.Prefix())
	}
	return nil
}
