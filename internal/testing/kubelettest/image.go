package kubelettest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// busyboxApplets are the commands the test image links to busybox: what a
// shell script in a test, the pause container and the host agent's probes
// use.
var busyboxApplets = []string{"sh", "sleep", "echo", "cat", "true", "false", "ls", "env", "kill", "wc", "date", "head", "tail", "grep", "dd", "yes",
	"rm", "mkdir", "mv", "cp", "touch", "ps", "stat", "test", "[", "sed", "awk", "tr", "seq", "printf", "id", "hostname", "wget", "nc", "du", "df", "find", "xargs", "timeout"}

// ociBlob is one content-addressed blob of an OCI image layout.
type ociBlob struct {
	mediaType string
	data      []byte
}

func (b ociBlob) digest() string {
	sum := sha256.Sum256(b.data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (b ociBlob) descriptor(annotations map[string]string) map[string]any {
	d := map[string]any{"mediaType": b.mediaType, "digest": b.digest(), "size": len(b.data)}
	if annotations != nil {
		d["annotations"] = annotations
	}
	return d
}

// BuildImage writes to out an OCI image layout archive, as `ctr images
// import` reads it, of an image named ref holding the static busybox at
// busybox (linked under /bin as the usual applets) and nothing else, whose
// command is cmd: no registry is reachable from the test machine, so the
// test node's images are made from files on it.
//
// files adds more: each key is a path in the image, each value the path of
// an executable on this machine to put there (e.g. a static Go binary).
func BuildImage(out, ref, busybox string, cmd []string, files map[string]string) error {
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("kubelettest: image: %w", err)
	}
	extra := map[string][]byte{}
	for dst, src := range files {
		if extra[dst], err = os.ReadFile(src); err != nil {
			return fmt.Errorf("kubelettest: image: %w", err)
		}
	}
	layer, diffID, err := busyboxLayer(bin, extra)
	if err != nil {
		return err
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux", "created": time.Unix(0, 0).UTC(),
		"config": map[string]any{"Cmd": cmd, "Env": []string{"PATH=/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	if err != nil {
		return err
	}
	cfgBlob := ociBlob{"application/vnd.oci.image.config.v1+json", config}
	layerBlob := ociBlob{"application/vnd.oci.image.layer.v1.tar+gzip", layer}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": cfgBlob.descriptor(nil), "layers": []any{layerBlob.descriptor(nil)},
	})
	if err != nil {
		return err
	}
	manBlob := ociBlob{"application/vnd.oci.image.manifest.v1+json", manifest}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []any{manBlob.descriptor(map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref})},
	})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
	}
	for _, b := range []ociBlob{cfgBlob, layerBlob, manBlob} {
		entries = append(entries, struct {
			name string
			data []byte
		}{"blobs/sha256/" + b.digest()[len("sha256:"):], b.data})
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755}); err != nil {
			return err
		}
	}
	for _, f := range entries {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// busyboxLayer is the image's one layer, gzipped, and the digest of its
// uncompressed tar (the config's diff id).
func busyboxLayer(bin []byte, extra map[string][]byte) (gz []byte, diffID string, err error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	dirs := []string{"bin/", "tmp/", "etc/", "proc/", "sys/", "dev/"}
	for _, dst := range slices.Sorted(maps.Keys(extra)) {
		for d := path.Dir(strings.TrimPrefix(dst, "/")); d != "." && !slices.Contains(dirs, d+"/"); d = path.Dir(d) {
			dirs = append(dirs, d+"/")
		}
	}
	slices.Sort(dirs)
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}); err != nil {
			return nil, "", err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin))}); err != nil {
		return nil, "", err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, "", err
	}
	for _, dst := range slices.Sorted(maps.Keys(extra)) {
		data := extra[dst]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dst, "/"), Mode: 0o755, Size: int64(len(data))}); err != nil {
			return nil, "", err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, "", err
		}
	}
	for _, a := range busyboxApplets {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: path.Join("bin", a), Linkname: "busybox", Mode: 0o777}); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw.Bytes())
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return out.Bytes(), "sha256:" + hex.EncodeToString(sum[:]), nil
}
