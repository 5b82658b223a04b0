package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/peloton-sched/peloton/hostmgr"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Defaults of the HealthCheck fields left zero, as documented in the API.
const (
	defaultHealthInterval  = 10 * time.Second
	defaultHealthTimeout   = 5 * time.Second
	defaultHealthThreshold = 3
)

// Reasons on the RUNNING events that report a change of health.
const (
	ReasonHealthPassed = "health-check-passed"
	ReasonHealthFailed = "health-check-failed"
)

const (
	// maxCheckOutput bounds how much of a command check's output is kept for
	// the message of an UNHEALTHY event.
	maxCheckOutput = 512
	// checkWaitDelay bounds how long a finished command check waits for its
	// output pipe to close when something it started outside its process
	// group still holds it.
	checkWaitDelay = time.Second
	// maxHTTPBody bounds how much of an HTTP check's answer is read, so that
	// the connection can be closed cleanly without reading a huge body.
	maxHTTPBody = 64 << 10
)

// healthTracker turns a run's check results into its health. It is the one
// place that holds the rules:
//
//   - a pass makes the run HEALTHY (from HEALTH_UNKNOWN or UNHEALTHY);
//   - threshold consecutive failures make it UNHEALTHY, whether it was
//     HEALTHY or had never passed yet; fewer leave its health as it was.
//
// It has no clock and no I/O; the watcher feeds it.
type healthTracker struct {
	threshold uint32
	state     pelotonv1.HealthState
	fails     uint32 // consecutive failures so far
}

// observe records one check result and reports whether the health changed.
func (h *healthTracker) observe(pass bool) (changed bool) {
	old := h.state
	if pass {
		h.fails = 0
		h.state = pelotonv1.HealthState_HEALTHY
	} else {
		if h.fails < ^uint32(0) {
			h.fails++
		}
		if h.fails >= max(h.threshold, 1) {
			h.state = pelotonv1.HealthState_UNHEALTHY
		}
	}
	return h.state != old
}

// healthConfig is a validated HealthCheck with its defaults applied and, for
// an HTTP check, its URL resolved against the run's ports.
type healthConfig struct {
	command      []string
	url          string
	initialDelay time.Duration
	interval     time.Duration
	timeout      time.Duration
	threshold    uint32
}

func seconds(s uint32, def time.Duration) time.Duration {
	if s == 0 {
		return def
	}
	return time.Duration(s) * time.Second
}

// validateHealthCheck checks the parts of a HealthCheck the backend depends
// on; jobmgr validates the same, this guards against any other caller.
func validateHealthCheck(hc *pelotonv1.HealthCheck, ports []hostmgr.Port) error {
	switch {
	case len(hc.Command) == 0 && hc.Http == nil:
		return errors.New("spec.healthCheck: set command (exit 0 = healthy) or http (a 2xx/3xx answer = healthy)")
	case len(hc.Command) > 0 && hc.Http != nil:
		return errors.New("spec.healthCheck: set command or http, not both")
	case len(hc.Command) > 0 && hc.Command[0] == "":
		return errors.New("spec.healthCheck.command[0]: must name the program to run")
	}
	for i, a := range hc.Command {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("spec.healthCheck.command[%d]: must not contain NUL", i)
		}
	}
	if hc.Http == nil {
		return nil
	}
	if _, ok := findPort(ports, hc.Http.Port); !ok {
		return fmt.Errorf("spec.healthCheck.http.port: %q is not one of the run's ports", hc.Http.Port)
	}
	if p := hc.Http.Path; p != "" {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("spec.healthCheck.http.path: must start with /, got %q", p)
		}
		if _, err := url.ParseRequestURI(p); err != nil {
			return fmt.Errorf("spec.healthCheck.http.path: %q: %v", p, err)
		}
	}
	return nil
}

// findPort finds a port by name, ignoring case as jobmgr's validation does.
func findPort(ports []hostmgr.Port, name string) (hostmgr.Port, bool) {
	for _, p := range ports {
		if strings.EqualFold(p.Name, name) {
			return p, true
		}
	}
	return hostmgr.Port{}, false
}

// newHealthConfig applies the defaults to a validated check. ports are the
// numbers the run was given.
func newHealthConfig(hc *pelotonv1.HealthCheck, spec []hostmgr.Port, ports map[string]uint32) healthConfig {
	cfg := healthConfig{
		command:      hc.Command,
		initialDelay: time.Duration(hc.InitialDelaySeconds) * time.Second,
		interval:     seconds(hc.IntervalSeconds, defaultHealthInterval),
		timeout:      seconds(hc.TimeoutSeconds, defaultHealthTimeout),
		threshold:    hc.FailureThreshold,
	}
	if cfg.threshold == 0 {
		cfg.threshold = defaultHealthThreshold
	}
	if hc.Http != nil {
		p, _ := findPort(spec, hc.Http.Port)
		path := hc.Http.Path
		if path == "" {
			path = "/"
		}
		cfg.url = fmt.Sprintf("http://127.0.0.1:%d%s", ports[p.Name], path)
	}
	return cfg
}

// newHealthClient is the HTTP client of all HTTP checks: no proxy (the
// check is on loopback), no kept-alive connections (one request per
// interval), and no redirects followed, since a 3xx answer is itself healthy.
func newHealthClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// watchHealth runs a run's health check until t.healthCtx is done, which
// happens when the run's process exits, when it is killed, or at Close. It
// sends a RUNNING event with the new Health whenever the health changes,
// and nothing otherwise. It never kills the run: jobmgr decides that.
//
// run() starts it after the first RUNNING event and waits for it to return
// before sending the terminal event; in between, it is the only sender of
// the task's events, which keeps them in order.
func (b *Backend) watchHealth(t *task, cfg healthConfig) {
	ctx := t.healthCtx
	tr := healthTracker{threshold: cfg.threshold}
	timer := time.NewTimer(cfg.initialDelay)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		// Checks start every interval; one that takes longer delays the
		// next, it never overlaps it.
		start := time.Now()
		pass, detail := b.probe(ctx, t, cfg)
		if ctx.Err() != nil {
			return // the run is over; the result means nothing
		}
		if tr.observe(pass) {
			reason, msg := ReasonHealthPassed, "health check passed"
			if tr.state == pelotonv1.HealthState_UNHEALTHY {
				reason = ReasonHealthFailed
				msg = fmt.Sprintf("health check failed %d times in a row: %s", tr.fails, detail)
			}
			ev := t.event(pelotonv1.TaskState_RUNNING, 0, reason, msg)
			ev.Health = tr.state
			b.log.Debug("health changed", "task", t.spec.TaskID, "health", tr.state.String(), "detail", detail)
			b.emit(t, ev)
		}
		timer.Reset(max(0, time.Until(start.Add(cfg.interval))))
	}
}

// probe runs one check and says whether it passed and, if not, why.
func (b *Backend) probe(ctx context.Context, t *task, cfg healthConfig) (bool, string) {
	if cfg.url != "" {
		return probeHTTP(ctx, b.health, cfg.url, cfg.timeout)
	}
	return probeCommand(ctx, cfg.command, t.env, t.sandbox, cfg.timeout, t.user.credential())
}

// probeHTTP GETs url; a 2xx or 3xx answer within timeout passes.
func probeHTTP(ctx context.Context, client *http.Client, url string, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", "peloton-health-check")
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return false, fmt.Sprintf("GET %s: timed out after %s", url, timeout)
		}
		return false, err.Error()
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxHTTPBody))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 399 {
		return false, fmt.Sprintf("GET %s: %s", url, resp.Status)
	}
	return true, ""
}

// probeCommand runs argv in dir with env, as the user cred names (nil: the
// control plane's), in a process group of its own, and passes iff it exits
// 0 within timeout. A check runs as its run does: it executes what the
// job's owner wrote, so it gets no more rights than the run. On timeout, or
// when ctx is done, the whole group is SIGKILLed; when the command exits,
// whatever it left in its group is SIGKILLed too, as for a task, so checks
// cannot pile up.
func probeCommand(ctx context.Context, argv, env []string, dir string, timeout time.Duration, cred *syscall.Credential) (bool, string) {
	path, err := lookPath(argv[0], envValue(env, "PATH"))
	if err != nil {
		return false, err.Error()
	}
	out := &cappedBuffer{max: maxCheckOutput}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        argv,
		Dir:         dir,
		Env:         env,
		Stdout:      out,
		Stderr:      out,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: cred},
		WaitDelay:   checkWaitDelay,
	}
	if err := cmd.Start(); err != nil {
		return false, err.Error()
	}
	pid := cmd.Process.Pid

	// Wait for the exit without reaping it (see exitNotify), so that the
	// group id stays ours while we signal the group. Where that is not
	// possible a goroutine reaps at once, and the timeout still applies.
	// One of the two channels is nil, and a nil channel never receives.
	notify := exitNotify(pid)
	var waited chan error
	if notify == nil {
		waited = make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	timedOut := false
	var werr error
	select {
	case <-notify:
	case werr = <-waited:
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
		timedOut = true
	}
	if timedOut {
		if notify != nil {
			syscall.Kill(-pid, syscall.SIGKILL)
			<-notify
		} else {
			cmd.Process.Kill()
			werr = <-waited
		}
	}
	if notify != nil {
		syscall.Kill(-pid, syscall.SIGKILL)
		werr = cmd.Wait()
	}
	switch {
	case timedOut:
		return false, fmt.Sprintf("timed out after %s", timeout)
	case werr != nil:
		if o := out.String(); o != "" {
			return false, werr.Error() + ": " + o
		}
		return false, werr.Error()
	}
	return true, ""
}

// cappedBuffer keeps the first max bytes written to it and drops the rest.
type cappedBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// String is the kept output on one line, trimmed, as valid UTF-8: a rune
// the cap cut in two is dropped, and bytes that are not UTF-8 (a program
// prints what it likes) become U+FFFD, so the message that carries it can
// be stored.
func (c *cappedBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buf.Bytes()
	if len(b) >= c.max {
		for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
			if utf8.RuneStart(b[i]) {
				if !utf8.FullRune(b[i:]) {
					b = b[:i]
				}
				break
			}
		}
	}
	return strings.ToValidUTF8(strings.Join(strings.Fields(string(b)), " "), string(utf8.RuneError))
}
