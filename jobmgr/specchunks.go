package jobmgr

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/peloton-sched/peloton/internal/store"
)

// Specs larger than etcd's request limit. An external etcd refuses any
// request over its --max-request-bytes (1.5 MiB by default), and a job's
// compressed spec version can be larger than that (100,000 instances with
// overrides, a large environment). Such a version is stored in chunks of
// specChunkBytes, each written in a transaction of its own before the
// version's record, which then holds a small manifest instead of the spec:
// the chunks' count, length and SHA-256. The record is still written in
// the job's (or the update's) own transaction with compare-and-swap, so a
// version exists exactly when its record does; chunks whose record never
// came (a create that failed, a racing update that lost) are deleted at
// once when possible, and otherwise swept at the next start.
//
// Chunk keys carry the first 16 hex digits of the blob's SHA-256
// (jobs/<id>/spec/<v>/chunk/<sha>/<i>), so two writers racing for the same
// version number never overwrite each other's chunks.

// specChunkBytes is the size of one chunk: a third of etcd's default
// request limit, leaving room for the key and the request's framing.
const specChunkBytes = 512 << 10

// chunkedMagic starts the record of a version stored in chunks; a
// zstd frame (every other record) starts with 0x28 0xB5 0x2F 0xFD.
var chunkedMagic = []byte("peloton/chunked-spec\x00")

// chunkManifest is what the record of a chunked version holds.
type chunkManifest struct {
	SHA256 string `json:"sha256"`
	Chunks int    `json:"chunks"`
	Bytes  int    `json:"bytes"`
}

func specChunkPrefix(id string, v uint64, sum string) string {
	return fmt.Sprintf("jobs/%s/spec/%d/chunk/%s/", id, v, sum)
}

// isChunkKey reports whether key (split on "/") names a chunk.
func isChunkKey(parts []string) bool {
	return len(parts) == 7 && parts[0] == "jobs" && parts[2] == "spec" && parts[4] == "chunk"
}

// versionRecord returns what to store at jobSpecKey(id, v) for the encoded
// version enc: enc itself when it fits in one request, else a manifest,
// once its chunks are written. undo deletes the chunks (nil when there are
// none); call it when the record's write fails.
func (m *Manager) versionRecord(ctx context.Context, id string, v uint64, enc []byte) (record []byte, undo func(), err error) {
	if len(enc) <= specChunkBytes {
		return enc, nil, nil
	}
	sum := sha256.Sum256(enc)
	man := chunkManifest{SHA256: hex.EncodeToString(sum[:]), Bytes: len(enc)}
	prefix := specChunkPrefix(id, v, man.SHA256[:16])
	var keys []string
	undo = func() {
		for _, k := range keys {
			if _, err := m.store.Txn(context.WithoutCancel(ctx), store.Delete(k, store.AnyRevision)); err != nil {
				m.log.Warn("delete a chunk of a spec that was not stored; the next start sweeps it", "key", k, "err", err)
			}
		}
	}
	for off := 0; off < len(enc); off += specChunkBytes {
		key := prefix + strconv.Itoa(man.Chunks)
		keys = append(keys, key)
		if _, err := m.store.Txn(ctx, store.Put(key, enc[off:min(off+specChunkBytes, len(enc))], store.AnyRevision)); err != nil {
			undo()
			return nil, nil, fmt.Errorf("store chunk %d of the spec (%d bytes in all): %w", man.Chunks, len(enc), err)
		}
		man.Chunks++
	}
	b, err := json.Marshal(man)
	if err != nil {
		undo()
		return nil, nil, err
	}
	return append(append([]byte{}, chunkedMagic...), b...), undo, nil
}

// specChunks holds the chunks read at start, by their prefix.
type specChunks map[string]map[int][]byte

// add records a chunk kv whose key is split into parts (isChunkKey).
func (c specChunks) add(parts []string, value []byte) {
	i, err := strconv.Atoi(parts[6])
	if err != nil {
		return
	}
	prefix := strings.Join(parts[:6], "/") + "/"
	if c[prefix] == nil {
		c[prefix] = map[int][]byte{}
	}
	c[prefix][i] = value
}

// assemble returns the encoded version of record: record itself, or the
// chunks its manifest names put together and checked. used collects the
// prefixes of the chunks it used.
func (c specChunks) assemble(key string, record []byte, used map[string]bool) ([]byte, error) {
	rest, ok := bytes.CutPrefix(record, chunkedMagic)
	if !ok {
		return record, nil
	}
	var man chunkManifest
	if err := json.Unmarshal(rest, &man); err != nil {
		return nil, fmt.Errorf("chunked spec manifest: %w", err)
	}
	if len(man.SHA256) < 16 {
		return nil, fmt.Errorf("chunked spec manifest: sha256 %q", man.SHA256)
	}
	prefix := key + "/chunk/" + man.SHA256[:16] + "/"
	used[prefix] = true
	chunks := c[prefix]
	out := make([]byte, 0, man.Bytes)
	for i := range man.Chunks {
		b, ok := chunks[i]
		if !ok {
			return nil, fmt.Errorf("chunked spec: chunk %d of %d is missing", i, man.Chunks)
		}
		out = append(out, b...)
	}
	if sum := sha256.Sum256(out); len(out) != man.Bytes || hex.EncodeToString(sum[:]) != man.SHA256 {
		return nil, fmt.Errorf("chunked spec: the chunks (%d bytes) do not match the manifest (%d bytes, sha256 %s)", len(out), man.Bytes, man.SHA256)
	}
	return out, nil
}

// unused lists the keys of the chunks no record used, in order.
func (c specChunks) unused(used map[string]bool) []string {
	var keys []string
	for prefix, chunks := range c {
		if used[prefix] {
			continue
		}
		for i := range chunks {
			keys = append(keys, prefix+strconv.Itoa(i))
		}
	}
	sort.Strings(keys)
	return keys
}
