package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A bad --partition-profiles file is a usage error naming the flag, the
// file and the field, before anything starts; a good one is taken.
func TestPartitionProfilesFlag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("bad.yaml", "profiles:\n  batch:\n    agent: {qosCpuHigh: 0.8, qosCpuLow: 0.9}\n")
	for _, tc := range []struct {
		file string
		want []string
	}{
		{bad, []string{"--partition-profiles", "bad.yaml", "profiles.batch.agent.qosCpuLow: 0.9 must be > 0 and below qosCpuHigh 0.8"}},
		{filepath.Join(dir, "missing.yaml"), []string{"--partition-profiles", "missing.yaml", "no such file"}},
	} {
		r := runCLI(t, "", "up", "--partition-profiles", tc.file)
		ok := r.code == exitUsage
		for _, w := range tc.want {
			ok = ok && strings.Contains(r.stderr, w)
		}
		if !ok {
			t.Errorf("up --partition-profiles %s: exit %d, stderr %q; want exit 2 naming %q", tc.file, r.code, r.stderr, tc.want)
		}
	}
	good := write("good.yaml", "profiles:\n  stateless:\n    labels: {tier: latency}\n    agent: {qosCpuHigh: 0.8, qosCpuLow: 0.6, oversubscriptionCap: 1}\n")
	got, err := readProfiles(good)
	if err != nil || got["stateless"].Labels["tier"] != "latency" || got["stateless"].Agent.OversubscriptionCap != 1 {
		t.Fatalf("readProfiles(good) = %+v, %v", got, err)
	}
}
