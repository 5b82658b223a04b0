package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/peloton-sched/peloton/cluster/client"
)

// The kubernetes scenario runs Peloton in a process of its own, so that
// its CPU is its own: the bench process also holds the apiserver's etcd
// and the watch and clients that measure the run, which would otherwise be
// counted with it.

// pelotonBinary is the peloton binary whose `up` the Peloton phases run:
// bin if set, else this executable when it is a peloton binary (a test
// binary is not, and must say which one to run).
func pelotonBinary(bin string) (string, error) {
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("--peloton-bin: this executable: %w", err)
		}
		if !strings.HasPrefix(filepath.Base(exe), "peloton") {
			return "", fmt.Errorf("--peloton-bin: this process (%s) is not a peloton binary; name the peloton binary whose `up` runs Peloton's phases", exe)
		}
		bin = exe
	}
	if fi, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("--peloton-bin: %w", err)
	} else if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("--peloton-bin %s: not an executable file", bin)
	}
	return bin, nil
}

// pelotonProc is `peloton up` running as a child process, with its own
// embedded etcd in its data dir and its listeners on free loopback ports,
// and a gRPC client to it.
type pelotonProc struct {
	cmd     *exec.Cmd
	dataDir string
	logPath string
	done    chan struct{}
	err     error // how it ended, once done is closed
	api     *client.Client
	// httpURL (http://host:port: REST, /metrics, /readyz) and cluster are
	// read from its ready line.
	httpURL, cluster string
}

// pelotonReadyPrefix starts the line `peloton up` prints once it serves
// (cli.readyLine): "peloton is ready: grpc <addr>, http ...".
const pelotonReadyPrefix = "peloton is ready: grpc "

// startPelotonProc runs `bin up` with args (besides its data dir, log
// level and listeners, which it sets) and waits, until ctx ends, for it to
// serve. Its output goes to logPath.
func startPelotonProc(ctx context.Context, bin, dataDir, logPath string, args []string) (*pelotonProc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bench: peloton's log: %w", err)
	}
	full := append([]string{"up", "--data-dir", dataDir, "--log-level", "warn",
		// Port 0 moves the federation `up` runs beside the cluster to free
		// ports too.
		"--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, args...)
	cmd := exec.Command(bin, full...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("bench: start %s (--peloton-bin): %w", bin, err)
	}
	p := &pelotonProc{cmd: cmd, dataDir: dataDir, logPath: logPath, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		// Every line goes to the log; the ready line to ready.
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if rest, ok := strings.CutPrefix(line, pelotonReadyPrefix); ok {
				select {
				case ready <- rest:
				default:
				}
			}
		}
		_, _ = io.Copy(logf, out)
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	var grpcAddr string
	select {
	case rest := <-ready:
		// "<grpc addr>, http <url>, etcd <urls>, data <dir>, cluster <name>"
		parts := strings.Split(rest, ", ")
		grpcAddr = parts[0]
		for _, part := range parts[1:] {
			if k, v, ok := strings.Cut(part, " "); ok {
				switch k {
				case "http":
					p.httpURL = v
				case "cluster":
					p.cluster = v
				}
			}
		}
	case <-p.done:
		return nil, fmt.Errorf("bench: peloton up exited before it served (%v):\n%s", p.err, p.tail(20))
	case <-ctx.Done():
		p.stop()
		return nil, fmt.Errorf("bench: peloton up did not serve: %w\n%s", ctx.Err(), p.tail(20))
	}
	p.api, err = client.New(grpcAddr, client.Options{Timeout: callTimeout, MaxMsgBytes: maxMsgBytes})
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("bench: connect to peloton at %s: %w", grpcAddr, err)
	}
	return p, nil
}

// exited reports whether the process has ended.
func (p *pelotonProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// cpu is the user + system CPU time the process used so far, its waited-for
// children's included (`up` on the kubernetes backend starts none today).
func (p *pelotonProc) cpu() (time.Duration, error) {
	if p.exited() {
		return 0, fmt.Errorf("bench: peloton up has exited (%v):\n%s", p.err, p.tail(20))
	}
	return procCPUWithChildren(p.cmd.Process.Pid)
}

// stop ends the process (SIGTERM, then SIGKILL after a minute), waits for
// it and removes its data; a second call does nothing.
func (p *pelotonProc) stop() {
	if p.api != nil {
		p.api.Close()
		p.api = nil
	}
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	_ = os.RemoveAll(p.dataDir)
}

// kill ends the process with SIGKILL, as a crash would, and waits for it;
// unlike stop it leaves its data, for a restart on it.
func (p *pelotonProc) kill() {
	if p.api != nil {
		p.api.Close()
		p.api = nil
	}
	if !p.exited() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the last n lines of the process's output.
func (p *pelotonProc) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// procCPUWithChildren reads utime + stime + cutime + cstime from
// /proc/<pid>/stat.
func procCPUWithChildren(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: peloton's CPU: %w", err)
	}
	s := string(b)
	// The command name is in parentheses and may hold spaces.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return 0, fmt.Errorf("bench: short /proc/%d/stat", pid)
	}
	// After the command: state(0) ... utime(11) stime(12) cutime(13) cstime(14).
	var sum int64
	var errs []error
	for _, i := range []int{11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		errs = append(errs, err)
		sum += v
	}
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("bench: /proc/%d/stat: %w", pid, err)
	}
	return time.Duration(sum) * time.Second / clockTicks, nil
}
