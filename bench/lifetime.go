package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/history"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// ScenarioLifetime pushes many short batch jobs through a cluster whose
// finished jobs leave etcd after a short time to live, and checks at a few
// points of its history that what a cluster costs stays flat.
const ScenarioLifetime = "lifetime"

// LifetimeConfig sizes the lifetime scenario (the lifetime-scale issue's
// workload).
type LifetimeConfig struct {
	// Hosts are the simulated hosts of the cluster.
	Hosts int
	// Checkpoints are the numbers of jobs pushed through at which the
	// figures are taken, increasing.
	Checkpoints []int
	// Instances is each job's instance count.
	Instances int
	// TTL is the cluster's --finished-job-ttl.
	TTL time.Duration
	// LiveJobs are the long-running jobs (of Instances each) present at
	// every restart.
	LiveJobs int
	// Rate is the jobs pushed per second (0: as fast as the cluster takes
	// them, MaxInFlight bounding the jobs not yet collected).
	Rate float64
	// MaxInFlight bounds the jobs created and not yet archived and removed
	// from etcd.
	MaxInFlight int
	// Samples is how many calls each latency figure times.
	Samples int
	// PelotonBin is the peloton binary whose `up` runs the cluster
	// (default: this executable, when it is a peloton binary).
	PelotonBin string
}

// DefaultLifetimeConfig is the size: 5,000 hosts, jobs of 10
// instances, a 1 s time to live, figures after 10k, 50k and 200k jobs, and
// 1,000 live jobs (10,000 live tasks) at each restart.
func DefaultLifetimeConfig() LifetimeConfig {
	return LifetimeConfig{Hosts: 5000, Checkpoints: []int{10000, 50000, 200000}, Instances: 10, TTL: time.Second,
		LiveJobs: 1000, MaxInFlight: 1000, Samples: 200}
}

// Sizes of the scenario's tasks: small, so that the live jobs fit any
// cluster the config allows, and sim hosts have 32 CPUs.
const (
	lifetimeTaskCPU    = 0.1
	lifetimeTaskMemMB  = 32
	lifetimeSimHostCPU = 32
	// maxLifetimeJobs bounds the jobs pushed through in one run.
	maxLifetimeJobs = 1_000_000
	// lifetimeCreators are the CreateJob calls in flight at once.
	lifetimeCreators = 8
	// storeReadWait is how long after the archive has caught up the
	// store's size is read: the stack reads it every 10 s (its quota
	// guard's interval), so this reading is one taken after every job
	// left etcd.
	storeReadWait = 11 * time.Second
	// lifetimeStall bounds any wait in which the cluster makes no
	// progress (no job collected, no job running, not ready).
	lifetimeStall = 5 * time.Minute
)

// Validate checks the config; every error names the flag at fault.
func (c *LifetimeConfig) Validate() error {
	switch {
	case c.Hosts < 1 || c.Hosts > maxHosts:
		return fmt.Errorf("--hosts %d: must be 1..%d", c.Hosts, maxHosts)
	case len(c.Checkpoints) == 0 || len(c.Checkpoints) > 10:
		return fmt.Errorf("--checkpoints: want 1 to 10 job counts, comma-separated")
	case c.Instances < 1 || c.Instances > 1000:
		return fmt.Errorf("--instances %d: must be 1..1000", c.Instances)
	case c.TTL < 0 || c.TTL > time.Hour:
		return fmt.Errorf("--ttl %s: must be 0 to 1h", c.TTL)
	case c.LiveJobs < 0 || c.LiveJobs*c.Instances > maxTasks:
		return fmt.Errorf("--live-jobs %d: must be 0..%d jobs of --instances", c.LiveJobs, maxTasks/c.Instances)
	case float64(c.LiveJobs*c.Instances)*lifetimeTaskCPU > 0.9*float64(c.Hosts*lifetimeSimHostCPU):
		return fmt.Errorf("--live-jobs %d: %d live tasks of %g CPU do not fit in 90%% of --hosts %d", c.LiveJobs, c.LiveJobs*c.Instances, lifetimeTaskCPU, c.Hosts)
	case c.Rate < 0 || c.Rate > 100000:
		return fmt.Errorf("--rate %g: must be 0 (as fast as the cluster takes them) to 100000 jobs/s", c.Rate)
	case c.MaxInFlight < 1 || c.MaxInFlight > 100000:
		return fmt.Errorf("--max-in-flight %d: must be 1..100000", c.MaxInFlight)
	case c.Samples < 1 || c.Samples > 100000:
		return fmt.Errorf("--samples %d: must be 1..100000", c.Samples)
	}
	prev := 0
	for _, n := range c.Checkpoints {
		if n <= prev || n > maxLifetimeJobs {
			return fmt.Errorf("--checkpoints %v: want increasing job counts, each 1..%d", c.Checkpoints, maxLifetimeJobs)
		}
		prev = n
	}
	return nil
}

// checkpointName is how a checkpoint appears in figure names: 10000 is
// "10k", 1000000 "1m", 1500 "1500".
func checkpointName(n int) string {
	switch {
	case n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "m"
	case n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// lifetimePerCheckpoint are the figures taken at every checkpoint, named
// with its size (etcdDbBytes10k).
var lifetimePerCheckpoint = []string{
	"pushJobsPerSec", "etcdDbBytes", "etcdDbInUseBytes", "rssMb", "anonMb", "jobListMsP50", "jobListMsP99",
	"archivedGetMsP50", "archivedGetMsP99", "archiveBytes", "restartToReadyMs", "restartServeMs", "restartRssMb", "restartAnonMb",
}

// lifetimeRatios are the figures also given as the last checkpoint's value
// over the first's (etcdDbBytes200kOver10k).
var lifetimeRatios = []string{
	"etcdDbBytes", "etcdDbInUseBytes", "rssMb", "anonMb", "jobListMsP50", "jobListMsP99", "archivedGetMsP50",
	"archivedGetMsP99", "restartToReadyMs", "restartServeMs", "restartRssMb", "restartAnonMb",
}

// LifetimeFigures are the figures a successful run with these checkpoints
// reports. The API's archived reads (archivedGetApiMs…) come on top when
// the cluster's GetJob reads archived jobs.
func LifetimeFigures(checkpoints []int) []string {
	var out []string
	for _, c := range checkpoints {
		for _, f := range lifetimePerCheckpoint {
			out = append(out, f+checkpointName(c))
		}
	}
	if len(checkpoints) > 1 {
		first, last := checkpointName(checkpoints[0]), checkpointName(checkpoints[len(checkpoints)-1])
		for _, f := range lifetimeRatios {
			out = append(out, f+last+"Over"+first)
		}
	}
	return append(out, "jobsPushed", "jobsCollected")
}

var lifetimeFigures = LifetimeFigures(DefaultLifetimeConfig().Checkpoints)

// lifetimeRun is the state of one run.
type lifetimeRun struct {
	cfg  LifetimeConfig
	env  Env
	r    *Result
	bin  string
	dir  string // the run's temp dir: data dir and log
	args []string
	proc *pelotonProc
	http *http.Client
	// collectedBefore is peloton_jobs_collected_total summed over the
	// processes that have ended (the counter starts at 0 in each).
	collectedBefore float64
	// pushed are the ids of the jobs pushed through, in order.
	mu     sync.Mutex
	pushed []string
	// cancelled counts the live jobs cancelled so far (they are archived
	// and collected like the others).
	cancelled int
	rng       *rand.Rand
	// notReady is the first answer of /readyz other than 200 since the
	// last start, if any.
	notReady string
	// apiReadsArchive is whether GetJob answered for an archived job:
	// unknown until the first checkpoint asks.
	apiReadsArchive *bool
}

// Lifetime runs `peloton up --backend sim` as a child process with a short
// --finished-job-ttl and pushes batch jobs of `sleep 0` tasks through it.
// At every checkpoint it waits until the collector has archived and
// removed every job pushed so far from etcd, then measures the store's
// size, the process's resident memory, `job list` and reads of archived
// jobs, and a restart after kill -9 with LiveJobs running jobs present.
func Lifetime(ctx context.Context, env Env, cfg LifetimeConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bin, err := pelotonBinary(cfg.PelotonBin)
	if err != nil {
		return nil, err
	}
	r := newResult(ScenarioLifetime)
	r.param("hosts", cfg.Hosts)
	r.param("checkpoints", cfg.Checkpoints)
	r.param("instances", cfg.Instances)
	r.param("ttl", cfg.TTL.String())
	r.param("liveJobs", cfg.LiveJobs)
	r.param("rate", cfg.Rate)
	r.param("maxInFlight", cfg.MaxInFlight)
	r.param("samples", cfg.Samples)
	dir, err := os.MkdirTemp("", "peloton-bench-lifetime-*")
	if err != nil {
		return nil, fmt.Errorf("bench: temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	lr := &lifetimeRun{cfg: cfg, env: env, r: r, bin: bin, dir: dir,
		args: []string{"--backend", "sim", "--hosts", strconv.Itoa(cfg.Hosts), "--finished-job-ttl", cfg.TTL.String()},
		http: &http.Client{Timeout: 30 * time.Second}, rng: rand.New(rand.NewPCG(1, 2))}
	defer func() {
		if lr.proc != nil {
			lr.proc.stop()
		}
	}()
	env.progress("lifetime: starting %s up --backend sim --hosts %d --finished-job-ttl %s", bin, cfg.Hosts, cfg.TTL)
	if _, _, err := lr.start(ctx); err != nil {
		return nil, err
	}
	for _, cp := range cfg.Checkpoints {
		if err := lr.checkpoint(ctx, cp); err != nil {
			return nil, err
		}
	}
	cps := cfg.Checkpoints
	if len(cps) > 1 {
		first, last := checkpointName(cps[0]), checkpointName(cps[len(cps)-1])
		for _, f := range append(lifetimeRatios, "archivedGetApiMsP50", "archivedGetApiMsP99") {
			a, okA := r.Figure(f + last)
			b, okB := r.Figure(f + first)
			if okA && okB {
				r.add(f+last+"Over"+first, ratio(a, b), "", "goal ≤ 1.2 (every figure flat)")
			}
		}
	}
	// The last live jobs too, so that every job of the run is counted.
	if err := lr.waitCaughtUp(ctx); err != nil {
		return nil, err
	}
	collected, err := lr.collected(ctx)
	if err != nil {
		return nil, err
	}
	r.add("jobsPushed", float64(len(lr.pushed)), "", "")
	r.add("jobsCollected", collected, "", fmt.Sprintf("archived and removed from etcd (peloton_jobs_collected_total over the %d processes): the jobs pushed and every live job, cancelled after each restart", len(cps)+1))
	r.note("the cluster is `peloton up --backend sim` in a process of its own (%s); rssMb and restartRssMb are its VmRSS alone", filepath.Base(bin))
	r.note("every restart is a SIGKILL (a crash) of that process and a start on the same data dir; restartToReadyMs runs from the new process's start to /readyz answering 200 and ListJobs answering (the live jobs are then checked to be listed)")
	r.note("archivedGetMs is history.Bolt.Get on <data-dir>/history.db in the bench's process while the cluster is down, of random archived jobs; archivedGetApiMs, when present, is GetJob through the API")
	switch {
	case lr.apiReadsArchive == nil:
	case *lr.apiReadsArchive:
		r.note("GetJob read archived jobs through the API: archivedGetApiMs* measured")
	default:
		r.note("GetJob did not read archived jobs (NotFound): this cluster's API does not read through to the archive yet, so archivedGetApiMs* is not measured")
	}
	return r.finish(), nil
}

// start runs the cluster on the run's data dir and waits until it is
// ready (/readyz 200 and ListJobs answering), returning how long it took
// from the process's start to print its ready line (its listeners serve)
// and to be ready.
func (lr *lifetimeRun) start(ctx context.Context) (serving, ready time.Duration, err error) {
	sctx, cancel := context.WithTimeout(ctx, lifetimeStall)
	defer cancel()
	t0 := time.Now()
	lr.notReady = ""
	p, err := startPelotonProc(sctx, lr.bin, filepath.Join(lr.dir, "data"), filepath.Join(lr.dir, "peloton.log"), lr.args)
	if err != nil {
		return 0, 0, err
	}
	serving = time.Since(t0)
	lr.proc = p
	if p.httpURL == "" {
		return 0, 0, errors.New("bench: peloton up's ready line names no http address")
	}
	err = waitFor(sctx, 10*time.Millisecond, "peloton up to be ready", func() (bool, string, error) {
		if p.exited() {
			return false, "", fmt.Errorf("bench: peloton up exited: %v\n%s", p.err, p.tail(20))
		}
		code, body, err := lr.get(sctx, "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		if code != http.StatusOK {
			why := fmt.Sprintf("/readyz %d: %s", code, strings.TrimSpace(body))
			if lr.notReady == "" {
				lr.notReady = why
			}
			return false, why, nil
		}
		if _, err := p.api.Jobs.ListJobs(sctx, &pelotonv1.ListJobsRequest{PageSize: 1}); err != nil {
			return false, "ListJobs: " + err.Error(), nil
		}
		return true, "", nil
	})
	return serving, time.Since(t0), err
}

// get reads path from the cluster's HTTP listener.
func (lr *lifetimeRun) get(ctx context.Context, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, lr.proc.httpURL+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := lr.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return resp.StatusCode, b.String(), sc.Err()
}

// metric sums the samples of one metric on the cluster's /metrics over
// their labels; 0 when it has none.
func (lr *lifetimeRun) metric(ctx context.Context, name string) (float64, error) {
	code, body, err := lr.get(ctx, "/metrics")
	if err != nil {
		return 0, fmt.Errorf("bench: /metrics: %w", err)
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("bench: /metrics: HTTP %d", code)
	}
	return metricSum(body, name)
}

// metricSum sums the samples named name in a Prometheus text exposition.
func metricSum(text, name string) (float64, error) {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if rest[0] == '{' {
			i := strings.LastIndexByte(rest, '}')
			if i < 0 {
				return 0, fmt.Errorf("bench: /metrics: bad line %q", line)
			}
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, fmt.Errorf("bench: /metrics: bad line %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /metrics: %q: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

// collected is how many jobs were archived and removed from etcd so far,
// over every process of the run.
func (lr *lifetimeRun) collected(ctx context.Context) (float64, error) {
	v, err := lr.metric(ctx, "peloton_jobs_collected_total")
	return lr.collectedBefore + v, err
}

// inFlight is how many jobs were created and not yet collected.
func (lr *lifetimeRun) inFlight(collected float64) int {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return len(lr.pushed) + lr.cancelled - int(collected)
}

func (lr *lifetimeRun) taskSpec(cmd ...string) *pelotonv1.TaskSpec {
	return &pelotonv1.TaskSpec{Command: cmd, Resources: &pelotonv1.Resources{Cpu: lifetimeTaskCPU, MemoryMb: lifetimeTaskMemMB}}
}

// push creates jobs until `to` were pushed in all, at cfg.Rate if set, and
// never more than MaxInFlight not yet collected. It returns the jobs per
// second, first create to last.
func (lr *lifetimeRun) push(ctx context.Context, to int) (float64, error) {
	from := len(lr.pushed)
	api := lr.proc.api
	start := time.Now()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var errOnce sync.Once
	var firstErr error
	fail := func(err error) { errOnce.Do(func() { firstErr = err; cancel() }) }
	sem := make(chan struct{}, lifetimeCreators)
	lastReport, lastCollected, lastGain := time.Now(), -1.0, time.Now()
	collected := 0.0
	for i := from; i < to && pctx.Err() == nil; i++ {
		if lr.cfg.Rate > 0 {
			at := start.Add(time.Duration(float64(i-from) / lr.cfg.Rate * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				select {
				case <-pctx.Done():
				case <-time.After(d):
				}
			}
		}
		// Hold back while too many jobs are not yet collected.
		for pctx.Err() == nil && lr.inFlight(collected) >= lr.cfg.MaxInFlight {
			c, err := lr.collected(pctx)
			if err != nil {
				fail(err)
				break
			}
			collected = c
			if c != lastCollected {
				lastCollected, lastGain = c, time.Now()
			} else if time.Since(lastGain) > lifetimeStall {
				fail(fmt.Errorf("bench: no job collected for %s with %d in flight (peloton_jobs_collected_total %g)", lifetimeStall, lr.inFlight(c), c))
				break
			}
			if lr.inFlight(collected) >= lr.cfg.MaxInFlight {
				select {
				case <-pctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		if time.Since(lastReport) >= 5*time.Second {
			lr.env.progress("lifetime: %d of %d jobs pushed, %.0f collected, %.0f jobs/s", i, to, collected, perSec(i-from, time.Since(start)))
			lastReport = time.Now()
		}
		if pctx.Err() != nil {
			break
		}
		spec := &pelotonv1.JobSpec{Name: fmt.Sprintf("lifetime-push-%d", i), Type: pelotonv1.JobType_BATCH, Pool: "/default",
			InstanceCount: uint32(lr.cfg.Instances), DefaultSpec: lr.taskSpec("sleep", "0")}
		lr.mu.Lock()
		lr.pushed = append(lr.pushed, "")
		lr.mu.Unlock()
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			resp, err := api.Jobs.CreateJob(pctx, &pelotonv1.CreateJobRequest{Spec: spec})
			if err != nil {
				fail(fmt.Errorf("CreateJob %s: %w", spec.Name, err))
				return
			}
			lr.mu.Lock()
			lr.pushed[i] = resp.JobId
			lr.mu.Unlock()
		}(i)
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return perSec(to-from, time.Since(start)), nil
}

// listAll lists every job matching req, page after page, as `peloton job
// list` does.
func listAll(ctx context.Context, p *pelotonProc, req *pelotonv1.ListJobsRequest) ([]*pelotonv1.Job, error) {
	var out []*pelotonv1.Job
	for pages := 0; ; pages++ {
		if pages > 10000 {
			return nil, errors.New("bench: ListJobs: more than 10,000 pages")
		}
		resp, err := p.api.Jobs.ListJobs(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("ListJobs: %w", err)
		}
		out = append(out, resp.Jobs...)
		if resp.NextPageToken == "" {
			return out, nil
		}
		req.PageToken = resp.NextPageToken
	}
}

// checkpoint pushes jobs up to cp, waits for the
// archive to catch up and takes the checkpoint's figures.
func (lr *lifetimeRun) checkpoint(ctx context.Context, cp int) error {
	cfg, r, name := lr.cfg, lr.r, checkpointName(cp)
	lr.env.progress("lifetime: pushing jobs %d to %d", len(lr.pushed), cp)
	rate, err := lr.push(ctx, cp)
	if err != nil {
		return err
	}
	r.add("pushJobsPerSec"+name, rate, "jobs/s", fmt.Sprintf("first to last CreateJob of the jobs up to %d (at most %d not yet collected)", cp, cfg.MaxInFlight))

	if err := lr.waitCaughtUp(ctx); err != nil {
		return err
	}

	// The store's size, once the stack has read it after the last removal.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(storeReadWait):
	}
	db, err := lr.metric(ctx, "peloton_store_db_bytes")
	if err != nil {
		return err
	}
	inUse, err := lr.metric(ctx, "peloton_store_db_in_use_bytes")
	if err != nil {
		return err
	}
	r.add("etcdDbBytes"+name, db, "bytes", "peloton_store_db_bytes (etcd's database file), read after every job left etcd")
	r.add("etcdDbInUseBytes"+name, inUse, "bytes", "peloton_store_db_in_use_bytes")
	status := fmt.Sprintf("/proc/%d/status", lr.proc.cmd.Process.Pid)
	r.add("rssMb"+name, float64(procKB(status, "VmRSS"))/1024, "MiB", "VmRSS of peloton up, no job live")
	r.add("anonMb"+name, float64(procKB(status, "RssAnon"))/1024, "MiB", "RssAnon of peloton up (heap and stacks: VmRSS without the pages of the files it maps, etcd's and the archive's)")

	// The live jobs, present for job list and the restart.
	var live []string
	if cfg.LiveJobs > 0 {
		lr.env.progress("lifetime: creating %d live jobs of %d instances", cfg.LiveJobs, cfg.Instances)
		live, err = lr.createLive(ctx, name)
		if err != nil {
			return err
		}
	}

	// job list, as the CLI lists: every page, the server's page size.
	lats := make([]float64, 0, cfg.Samples)
	for range cfg.Samples {
		t := time.Now()
		jobs, err := listAll(ctx, lr.proc, &pelotonv1.ListJobsRequest{})
		if err != nil {
			return err
		}
		lats = append(lats, ms(time.Since(t)))
		if len(jobs) < cfg.LiveJobs {
			return fmt.Errorf("bench: job list listed %d jobs, fewer than the %d live", len(jobs), cfg.LiveJobs)
		}
	}
	r.add("jobListMsP50"+name, percentile(lats, 50), "ms", fmt.Sprintf("every page of ListJobs with %d live jobs, %d times", cfg.LiveJobs, cfg.Samples))
	r.add("jobListMsP99"+name, percentile(lats, 99), "ms", "")

	ids := lr.sample(cp)
	if err := lr.apiArchivedGets(ctx, name, ids); err != nil {
		return err
	}

	// kill -9, the archive read in this process while the cluster is
	// down, then the restart.
	c, err := lr.metric(ctx, "peloton_jobs_collected_total")
	if err != nil {
		return err
	}
	lr.collectedBefore += c
	lr.env.progress("lifetime: kill -9 of peloton up with %d live jobs", len(live))
	lr.proc.kill()
	if err := lr.archivedGets(ctx, name, ids); err != nil {
		return err
	}
	lr.env.progress("lifetime: restarting peloton up")
	serving, took, err := lr.start(ctx)
	if err != nil {
		return err
	}
	got, err := listAll(ctx, lr.proc, &pelotonv1.ListJobsRequest{Name: "lifetime-live-" + name + "-", PageSize: 5000})
	if err != nil {
		return err
	}
	if len(got) != len(live) {
		return fmt.Errorf("bench: after the restart ListJobs lists %d of the %d live jobs", len(got), len(live))
	}
	r.add("restartToReadyMs"+name, ms(took), "ms", fmt.Sprintf("kill -9, then start to /readyz 200 and ListJobs, %d live tasks; goal < 5,000 with 10,000", len(live)*cfg.Instances))
	r.add("restartServeMs"+name, ms(serving), "ms", "start to the ready line: the listeners serve, /readyz may still say why not ready")
	restarted := fmt.Sprintf("/proc/%d/status", lr.proc.cmd.Process.Pid)
	r.add("restartRssMb"+name, float64(procKB(restarted, "VmRSS"))/1024, "MiB", "VmRSS of peloton up once ready after the restart")
	r.add("restartAnonMb"+name, float64(procKB(restarted, "RssAnon"))/1024, "MiB", "RssAnon of peloton up once ready after the restart")
	if lr.notReady != "" {
		r.note("restart at %s: serving after %s, then not ready at first: %s", name, serving.Round(time.Millisecond), lr.notReady)
	}
	lr.env.progress("lifetime: ready %s after the restart (serving after %s); cancelling the live jobs", took.Round(time.Millisecond), serving.Round(time.Millisecond))
	return lr.cancelLive(ctx, live)
}

// waitCaughtUp waits until every job pushed and every live job cancelled
// so far was archived and removed from etcd: counted by the collector, and
// no longer listed.
func (lr *lifetimeRun) waitCaughtUp(ctx context.Context) error {
	lr.mu.Lock()
	want := float64(len(lr.pushed) + lr.cancelled)
	lr.mu.Unlock()
	lr.env.progress("lifetime: waiting for the collector to archive %g jobs", want)
	stall := lifetimeStall + lr.cfg.TTL
	last, lastGain := -1.0, time.Now()
	err := waitFor(ctx, 100*time.Millisecond, "the archive catching up", func() (bool, string, error) {
		if lr.proc.exited() {
			return false, "", fmt.Errorf("bench: peloton up exited: %v\n%s", lr.proc.err, lr.proc.tail(20))
		}
		c, err := lr.collected(ctx)
		if err != nil {
			return false, "", err
		}
		if c != last {
			last, lastGain = c, time.Now()
		} else if time.Since(lastGain) > stall {
			return false, "", fmt.Errorf("bench: no job collected for %s, %g of %g", stall, c, want)
		}
		if c > want {
			return false, "", fmt.Errorf("bench: %g jobs collected, more than the %g created", c, want)
		}
		return c == want, fmt.Sprintf("%g of %g collected", c, want), nil
	})
	if err != nil {
		return err
	}
	left, err := listAll(ctx, lr.proc, &pelotonv1.ListJobsRequest{Name: "lifetime-", PageSize: 5000})
	if err != nil {
		return err
	}
	if len(left) != 0 {
		return fmt.Errorf("bench: every job was counted collected, but ListJobs still lists %d (%s, %s)", len(left), left[0].GetSpec().GetName(), left[0].GetStatus().GetState())
	}
	return nil
}

// createLive creates the live jobs (tasks sleeping a day) and waits until
// all of them run.
func (lr *lifetimeRun) createLive(ctx context.Context, name string) ([]string, error) {
	cfg := lr.cfg
	ids := make([]string, cfg.LiveJobs)
	if err := lr.each(ctx, cfg.LiveJobs, func(ctx context.Context, i int) error {
		spec := &pelotonv1.JobSpec{Name: fmt.Sprintf("lifetime-live-%s-%d", name, i), Type: pelotonv1.JobType_BATCH, Pool: "/default",
			InstanceCount: uint32(cfg.Instances), DefaultSpec: lr.taskSpec("sleep", "86400")}
		resp, err := lr.proc.api.Jobs.CreateJob(ctx, &pelotonv1.CreateJobRequest{Spec: spec})
		if err != nil {
			return fmt.Errorf("CreateJob %s: %w", spec.Name, err)
		}
		ids[i] = resp.JobId
		return nil
	}); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, lifetimeStall)
	defer cancel()
	err := waitFor(wctx, 200*time.Millisecond, "the live jobs to run", func() (bool, string, error) {
		jobs, err := listAll(wctx, lr.proc, &pelotonv1.ListJobsRequest{Name: "lifetime-live-" + name + "-", PageSize: 5000})
		if err != nil {
			return false, "", err
		}
		running := 0
		for _, j := range jobs {
			if err := notFailed(j); err != nil {
				return false, "", err
			}
			if j.GetStatus().GetTaskCounts()[pelotonv1.TaskState_RUNNING.String()] == uint32(cfg.Instances) {
				running++
			}
		}
		return running == cfg.LiveJobs, fmt.Sprintf("%d of %d live jobs running", running, cfg.LiveJobs), nil
	})
	return ids, err
}

// cancelLive cancels the live jobs; the collector archives them like the
// others.
func (lr *lifetimeRun) cancelLive(ctx context.Context, ids []string) error {
	err := lr.each(ctx, len(ids), func(ctx context.Context, i int) error {
		if _, err := lr.proc.api.Jobs.CancelJob(ctx, &pelotonv1.CancelJobRequest{JobId: ids[i]}); err != nil {
			return fmt.Errorf("CancelJob %s: %w", ids[i], err)
		}
		return nil
	})
	lr.mu.Lock()
	lr.cancelled += len(ids)
	lr.mu.Unlock()
	return err
}

// each runs f for 0..n-1, lifetimeCreators at a time, and returns the
// first error.
func (lr *lifetimeRun) each(ctx context.Context, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	sem := make(chan struct{}, lifetimeCreators)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// sample picks Samples ids at random among the first n jobs pushed, all
// archived by now.
func (lr *lifetimeRun) sample(n int) []string {
	ids := make([]string, lr.cfg.Samples)
	for i := range ids {
		ids[i] = lr.pushed[lr.rng.IntN(n)]
	}
	return ids
}

// apiArchivedGets times GetJob of archived jobs through the API, if the
// cluster's API reads the archive; a NotFound says it does not (yet), and
// the figure is left out.
func (lr *lifetimeRun) apiArchivedGets(ctx context.Context, name string, ids []string) error {
	if lr.apiReadsArchive != nil && !*lr.apiReadsArchive {
		return nil
	}
	lats := make([]float64, 0, len(ids))
	for _, id := range ids {
		t := time.Now()
		resp, err := lr.proc.api.Jobs.GetJob(ctx, &pelotonv1.GetJobRequest{JobId: id})
		d := time.Since(t)
		if status.Code(err) == codes.NotFound && len(lats) == 0 {
			lr.apiReadsArchive = ptr(false)
			return nil
		}
		if err != nil {
			return fmt.Errorf("GetJob %s (archived): %w", id, err)
		}
		if !resp.GetJob().GetStatus().GetArchived() {
			return fmt.Errorf("bench: GetJob %s: not marked archived, but it was counted collected", id)
		}
		lats = append(lats, ms(d))
	}
	lr.apiReadsArchive = ptr(true)
	lr.r.add("archivedGetApiMsP50"+name, percentile(lats, 50), "ms", fmt.Sprintf("GetJob of %d random archived jobs through the API", len(ids)))
	lr.r.add("archivedGetApiMsP99"+name, percentile(lats, 99), "ms", "")
	return nil
}

// archivedGets times reads of archived jobs from the embedded archive, in
// this process, while the cluster is down (the file is the cluster's
// while it runs). Every job must be there.
func (lr *lifetimeRun) archivedGets(ctx context.Context, name string, ids []string) error {
	path := filepath.Join(lr.proc.dataDir, cluster.ArchiveFile)
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("bench: the archive: %w", err)
	}
	h, err := history.OpenBolt(path)
	if err != nil {
		return err
	}
	defer h.Close()
	lats := make([]float64, 0, len(ids))
	for _, id := range ids {
		t := time.Now()
		j, err := h.Get(ctx, lr.proc.cluster, id)
		d := time.Since(t)
		if err != nil {
			return fmt.Errorf("bench: archived job %s: %w", id, err)
		}
		if j.ID != id || len(j.Tasks) != lr.cfg.Instances {
			return fmt.Errorf("bench: archived job %s: read back %s with %d tasks", id, j.ID, len(j.Tasks))
		}
		lats = append(lats, ms(d))
	}
	lr.r.add("archiveBytes"+name, float64(fi.Size()), "bytes", "history.db, the embedded archive")
	lr.r.add("archivedGetMsP50"+name, percentile(lats, 50), "ms", fmt.Sprintf("history.Bolt.Get of %d random archived jobs, decoded", len(ids)))
	lr.r.add("archivedGetMsP99"+name, percentile(lats, 99), "ms", "goal < 20 at 1,000,000 archived jobs")
	return nil
}
