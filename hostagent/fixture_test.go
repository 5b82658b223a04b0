package hostagent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fsTree builds a fixture filesystem under t.TempDir():
//
//	root := newTree(t).file("proc/meminfo", meminfoText(8<<30, 5<<30)).root
type fsTree struct {
	t    testing.TB
	root string
}

func newTree(t testing.TB) *fsTree {
	t.Helper()
	return &fsTree{t: t, root: t.TempDir()}
}

// file writes content at rel, creating parent directories.
func (f *fsTree) file(rel, content string) *fsTree {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return f
}

// dir creates an empty directory at rel.
func (f *fsTree) dir(rel string) *fsTree {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Join(f.root, rel), 0o755); err != nil {
		f.t.Fatal(err)
	}
	return f
}

// symlink makes rel a symbolic link to target (relative to rel's directory).
func (f *fsTree) symlink(rel, target string) *fsTree {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		f.t.Fatal(err)
	}
	return f
}

// path returns rel under the tree's root.
func (f *fsTree) path(rel string) string { return filepath.Join(f.root, rel) }

const (
	kiB = 1 << 10
	miB = 1 << 20
	giB = 1 << 30
)

// meminfoText is a /proc/meminfo with the given MemTotal and MemAvailable
// (bytes, written in kB as the kernel does) among other lines.
func meminfoText(total, available uint64) string {
	return fmt.Sprintf(`MemTotal:       %d kB
MemFree:          123456 kB
MemAvailable:   %d kB
Buffers:           65536 kB
Cached:          1048576 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
`, total/kiB, available/kiB)
}

// procStatText is a /proc/stat whose aggregate line has the given columns,
// followed by per-CPU lines that must not be read.
func procStatText(cols ...uint64) string {
	var b strings.Builder
	b.WriteString("cpu ")
	for _, c := range cols {
		fmt.Fprintf(&b, " %d", c)
	}
	b.WriteString("\ncpu0 999999 0 0 0 0 0 0 0 0 0\ncpu1 999999 0 0 0 0 0 0 0 0 0\nintr 1 2 3\nctxt 42\n")
	return b.String()
}

// statLine is a /proc/<pid>/stat line with every field proc(5) lists (52),
// the ones we read set from the arguments and the others plausible: start
// time 83894, no environment addresses.
func statLine(pid int, comm string, ppid int, utime, stime, cutime, cstime, rss uint64) string {
	return procStatFields{pid: pid, comm: comm, ppid: ppid, utime: utime, stime: stime,
		cutime: cutime, cstime: cstime, start: 83894, rss: rss}.line()
}

// procStatFields are the fields of a stat line a test sets; line renders
// them with the other fields plausible.
type procStatFields struct {
	pid                          int
	comm                         string
	ppid                         int
	pgrp                         int // 0: the same as ppid
	utime, stime, cutime, cstime uint64
	start, rss                   uint64
	envStart, envEnd             uint64
}

func (p procStatFields) line() string {
	f := make([]string, 53) // f[n] is field n; f[0] unused
	for i := range f {
		f[i] = "0"
	}
	f[1] = fmt.Sprint(p.pid)
	f[2] = "(" + p.comm + ")"
	f[3] = "S"
	f[4] = fmt.Sprint(p.ppid)
	f[5], f[6] = f[4], f[4] // pgrp, session
	if p.pgrp != 0 {
		f[5] = fmt.Sprint(p.pgrp)
	}
	f[7] = "34816" // tty_nr
	f[8] = "-1"    // tpgid, the one field that is often negative
	f[14], f[15] = fmt.Sprint(p.utime), fmt.Sprint(p.stime)
	f[16], f[17] = fmt.Sprint(p.cutime), fmt.Sprint(p.cstime)
	f[18], f[19] = "20", "0" // priority, nice
	f[20] = "1"              // num_threads
	f[22] = fmt.Sprint(p.start)
	f[23] = "3133440" // vsize
	f[24] = fmt.Sprint(p.rss)
	f[25] = "18446744073709551615" // rsslim
	f[50], f[51] = fmt.Sprint(p.envStart), fmt.Sprint(p.envEnd)
	return strings.Join(f[1:], " ") + "\n"
}
