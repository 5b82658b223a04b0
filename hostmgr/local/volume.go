package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/peloton-sched/peloton/hostmgr"
)

// volumesDir is the directory under Config.Dir that holds the persistent
// volumes, as <Dir>/volumes/<host>/<volume ID>. validTaskID refuses this
// name, so no sandbox can take its place.
const volumesDir = "volumes"

var _ hostmgr.VolumeReleaser = (*Backend)(nil)

// volumeKey names a volume in Backend.volUse and Backend.releasing.
func volumeKey(host, id string) string { return host + "/" + id }

// volumePath is where the volume lives. host and id must have been
// validated (a known host, validVolumeID).
func (b *Backend) volumePath(host, id string) string {
	return filepath.Join(b.dir, volumesDir, host, id)
}

// validVolumeID reports whether id can name a directory directly under
// <Dir>/volumes/<host>: a plain file name, so it cannot escape it.
func validVolumeID(id string) bool { return validTaskID(id) }

// ReleaseVolume deletes a volume and its contents from its host. Releasing
// a volume that does not exist (never used, or already released) succeeds,
// so a caller may retry after a crash. It refuses a volume that a live run
// of this Backend uses, rather than delete files under a running process;
// the caller kills the run first and releases once its terminal event has
// arrived. A run of a previous process lifetime is not known to be using
// it, and is not protected.
func (b *Backend) ReleaseVolume(ctx context.Context, host, volumeID string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: release volume %s: %w", volumeID, err)
	}
	if !b.hasHost(host) {
		return fmt.Errorf("local: release volume %s: host: %q is not a host of the local backend", volumeID, host)
	}
	if !validVolumeID(volumeID) {
		return fmt.Errorf("local: release volume: volumeId: %q is not a valid file name", volumeID)
	}
	key := volumeKey(host, volumeID)
	b.mu.Lock()
	if user, ok := b.volUse[key]; ok {
		b.mu.Unlock()
		return fmt.Errorf("local: release volume %s on %s: in use by run %s", volumeID, host, user)
	}
	if b.releasing[key] {
		b.mu.Unlock()
		return fmt.Errorf("local: release volume %s on %s: already being released", volumeID, host)
	}
	// Launch refuses the volume while it is marked, so no run can start on
	// it while it is being deleted without the lock.
	b.releasing[key] = true
	b.mu.Unlock()

	err := os.RemoveAll(b.volumePath(host, volumeID))

	b.mu.Lock()
	delete(b.releasing, key)
	b.mu.Unlock()
	if err != nil {
		return fmt.Errorf("local: release volume %s on %s: %w", volumeID, host, err)
	}
	b.log.Info("volume released", "volume", volumeID, "host", host)
	return nil
}
