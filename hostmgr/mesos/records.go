package mesos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/peloton-sched/peloton/hostmgr"
	"github.com/peloton-sched/peloton/internal/quarantine"
	"github.com/peloton-sched/peloton/internal/resources"
	"github.com/peloton-sched/peloton/internal/sanitize"
	"github.com/peloton-sched/peloton/internal/store"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Store layout, relative to the stack's store prefix:
//
//	mesos/framework-id   the framework ID the master gave at the first SUBSCRIBE
//	mesos/runs/<task-id> JSON record of a run: written before its ACCEPT,
//	                     rewritten with its end before that end is acknowledged
const (
	keyFrameworkID = "mesos/framework-id"
	keyRuns        = "mesos/runs/"
)

// record is what the store keeps of one run; well under 1 KiB.
type record struct {
	Agent    string            `json:"a"`
	Host     string            `json:"h"`
	Res      [4]int64          `json:"r"`
	Ports    map[string]uint32 `json:"p,omitempty"`
	Volume   string            `json:"v,omitempty"`
	State    int32             `json:"s"`
	ExitCode int32             `json:"x,omitempty"`
	Reason   string            `json:"why,omitempty"`
	Message  string            `json:"m,omitempty"`
	Time     int64             `json:"t"`
}

func recordOf(r *run) record {
	return record{Agent: r.agentID, Host: r.host,
		Res:   [4]int64{r.res.MilliCPU, r.res.MemoryMB, r.res.DiskMB, r.res.GPU},
		Ports: r.ports, Volume: volumeOf(r), State: int32(r.last.State), ExitCode: r.last.ExitCode,
		Reason: r.last.Reason, Message: sanitize.Text(r.last.Message, maxRecordMessage), Time: r.last.Time.UnixNano()}
}

// volumeOf is the ID of the run's volume ("" for none).
func volumeOf(r *run) string {
	if _, id, ok := strings.Cut(r.volKey, "\x00"); ok {
		return id
	}
	return ""
}

// maxRecordMessage bounds the message a run record keeps. The executor's
// message is cut on a rune boundary and made valid UTF-8 (sanitize): a cut
// inside a rune, or an executor's invalid bytes, would come back from the
// record as replacement characters, past the bound.
const maxRecordMessage = 256

// runOf rebuilds a run from its record, as a restarted backend knows it
// before reconciliation tells more.
func runOf(id string, rec record) *run {
	r := &run{id: id, agentID: rec.Agent, host: rec.Host, ports: rec.Ports, accepted: true, has: true,
		res: resources.Resources{MilliCPU: rec.Res[0], MemoryMB: rec.Res[1], DiskMB: rec.Res[2], GPU: rec.Res[3]}}
	r.last = hostmgr.TaskEvent{TaskID: id, Host: rec.Host, State: pelotonv1.TaskState(rec.State), ExitCode: rec.ExitCode,
		Reason: rec.Reason, Message: rec.Message, Time: time.Unix(0, rec.Time), Ports: rec.Ports}
	r.ended = terminal(r.last.State)
	if rec.Volume != "" {
		r.volKey = rec.Host + "\x00" + rec.Volume
	}
	return r
}

func (b *Backend) writeRecord(ctx context.Context, r *run, expect int64) error {
	b.mu.Lock()
	v, err := json.Marshal(recordOf(r))
	b.mu.Unlock()
	if err != nil {
		return err
	}
	_, err = b.batcher.Write(ctx, store.Put(keyRuns+r.id, v, expect))
	return err
}

func (b *Backend) deleteRecord(ctx context.Context, id string) {
	if _, err := b.batcher.Write(ctx, store.Delete(keyRuns+id, store.AnyRevision)); err != nil && !errors.Is(err, store.ErrNotFound) {
		b.log.Warn("mesos: deleting a run record", "task", id, "err", err)
	}
}

// load reads the framework ID and the run records; records of runs that
// ended longer ago than RecordRetention are deleted.
func (b *Backend) load(ctx context.Context) error {
	kv, err := b.cfg.Store.Get(ctx, keyFrameworkID)
	switch {
	case err == nil:
		b.frameworkID = string(kv.Value)
	case !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("mesos: reading the framework ID: %w", err)
	}
	kvs, err := b.cfg.Store.List(ctx, keyRuns)
	if err != nil {
		return fmt.Errorf("mesos: reading run records: %w", err)
	}
	cutoff := time.Now().Add(-b.cfg.RecordRetention)
	var stale []store.Op
	for _, kv := range kvs {
		id := strings.TrimPrefix(kv.Key, keyRuns)
		var rec record
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			// The run is then unknown here: jobmgr finds it lost and runs
			// its instance again, and the record waits for a person.
			if _, err := quarantine.Move(ctx, b.cfg.Store, b.log, kv, err); err != nil {
				return fmt.Errorf("mesos: %w", err)
			}
			continue
		}
		r := runOf(id, rec)
		if r.ended && r.last.Time.Before(cutoff) {
			stale = append(stale, store.Delete(kv.Key, kv.Revision))
			continue
		}
		b.runs[id] = r
		if r.accepted {
			b.count(r)
		}
		if r.volKey != "" && !r.ended {
			b.volUse[r.volKey] = id
		}
	}
	for len(stale) > 0 {
		n := min(len(stale), b.cfg.Store.MaxTxnOps())
		if _, err := b.cfg.Store.Txn(ctx, stale[:n]...); err != nil && !errors.Is(err, store.ErrConflict) {
			b.log.Warn("mesos: pruning old run records", "err", err)
		}
		stale = stale[n:]
	}
	return nil
}

// saveFrameworkID keeps the ID the master gave, so that a restarted or
// standby stack subscribes as the same framework.
func (b *Backend) saveFrameworkID(ctx context.Context, id string) error {
	b.mu.Lock()
	old := b.frameworkID
	b.mu.Unlock()
	if old == id {
		return nil
	}
	expect := store.AnyRevision
	if old == "" {
		expect = store.MustNotExist
	} else {
		b.log.Warn("mesos: the master gave a new framework ID; the old framework's tasks are gone", "old", old, "new", id)
	}
	if _, err := b.cfg.Store.Txn(ctx, store.Put(keyFrameworkID, []byte(id), expect)); err != nil {
		return fmt.Errorf("mesos: storing framework ID %s: %w", id, err)
	}
	b.mu.Lock()
	b.frameworkID = id
	b.mu.Unlock()
	return nil
}
