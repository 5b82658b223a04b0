package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/ui"
)

// uiLoadFigures is what one load of a large job's page measured in the
// browser, in milliseconds: when the instance grid was first drawn with
// the instances (from navigation start; the first page of 1,000 fills the
// screen), when all were drawn, the longest task while loading,
// and the longest task and the longest frame while the grid scrolls.
type uiLoadFigures struct {
	FirstRender  float64 `json:"firstRender"`
	AllDrawn     float64 `json:"allDrawn"`
	LoadLongest  float64 `json:"loadLongest"`
	ScrollLong   float64 `json:"scrollLongest"`
	ScrollFrame  float64 `json:"scrollFrame"`
	Instances    int     `json:"instances"`
	ScrollFrames int     `json:"frames"`
}

// measureJobPage scrolls the grid from top to bottom and back, one step
// per animation frame, watching long tasks (> 50 ms) with the browser's
// Long Tasks API and the time between frames.
const measureJobPage = `(async () => {
  const load = (window.__longtasks || []).reduce((m, e) => Math.max(m, e.duration), 0);
  const g = document.querySelector(".grid");
  const long = [];
  const obs = new PerformanceObserver((l) => long.push(...l.getEntries()));
  obs.observe({ type: "longtask" });
  let worst = 0, frames = 0, last = performance.now();
  const frame = () => new Promise((r) => requestAnimationFrame(() => {
    const now = performance.now(); worst = Math.max(worst, now - last); last = now; frames++; r();
  }));
  const step = 20;
  for (let y = 0; y <= g.scrollHeight; y += step) { g.scrollTop = y; await frame(); }
  for (let y = g.scrollHeight; y >= 0; y -= step) { g.scrollTop = y; await frame(); }
  await new Promise((r) => setTimeout(r, 100));
  obs.disconnect();
  const mark = performance.getEntriesByName("peloton:grid")[0];
  return {
    firstRender: mark ? mark.startTime : -1,
    allDrawn: (performance.getEntriesByName("peloton:grid-all")[0] || { startTime: -1 }).startTime,
    loadLongest: load,
    scrollLongest: long.reduce((m, e) => Math.max(m, e.duration), 0),
    scrollFrame: worst,
    instances: document.querySelector(".legend") ? Number((document.querySelector(".legend").innerText.match(/\d+/g) || []).reduce((a, b) => a + Number(b), 0)) : 0,
    frames,
  };
})()`

// BenchmarkUILargeJob loads the page of a job of 10,000 instances (sim
// backend) in headless Chromium, once per iteration, and reports when the
// grid was first drawn and the longest tasks while loading and scrolling.
// docs/benchmarks.md has the figures and the command.
func BenchmarkUILargeJob(b *testing.B) {
	chromium := chromiumPath(b)
	base := startBenchStack(b)
	var created struct{ JobID string }
	restJSONB(b, "POST", base+"/v1/jobs?requestId=bench-ui", `{"name":"wide","type":"BATCH","pool":"/default","instanceCount":10000,
		"defaultSpec":{"command":["sleep","3600"],"resources":{"cpu":0.05,"memoryMb":8}}}`, &created)
	// Tasks are created asynchronously; poll (bounded) until all are there.
	// Slowly on purpose, so not with Eventually (every 50 ms at most): each
	// count lists 10,000 tasks, and a faster poll would load the stack whose
	// creation it waits for.
	for i := 0; countTasks(b, base, created.JobID) < 10000; i++ {
		if i == 360 {
			b.Fatal("the 10,000 tasks were not created within 3 minutes")
		}
		time.Sleep(500 * time.Millisecond)
	}
	br := newBrowser(b, chromium, 1280, 800)
	// Long tasks while the page loads are watched from before its scripts run.
	watchLongTasks := func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `window.__longtasks = []; new PerformanceObserver((l) => window.__longtasks.push(...l.getEntries())).observe({ type: "longtask" });`})
		return chromedp.Void{}, err
	}
	if err := br.Do(10*time.Second, chromedp.EmulateViewport(1280, 800), watchLongTasks); err != nil {
		b.Fatal(err)
	}
	jobPage := base + "/ui/jobs/" + created.JobID
	var sum uiLoadFigures
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := br.Do(30*time.Second, chromedp.Navigate("about:blank"), chromedp.Navigate(jobPage)); err != nil {
			b.Fatal(err)
		}
		br.WaitJS(b, "the job page", `performance.getEntriesByName("peloton:grid").length && document.body.dataset.ready`, 60*time.Second)
		f, err := evalJS[uiLoadFigures](br, 60*time.Second, measureJobPage)
		if err != nil {
			b.Fatal(err)
		}
		if f.Instances != 10000 {
			b.Fatalf("the grid shows %d instances, want 10000", f.Instances)
		}
		b.Logf("load %d: first render %.0f ms, all 10,000 drawn %.0f ms, longest task loading %.0f ms, scrolling %.0f ms, longest frame %.0f ms (%d frames)",
			i+1, f.FirstRender, f.AllDrawn, f.LoadLongest, f.ScrollLong, f.ScrollFrame, f.ScrollFrames)
		sum.FirstRender += f.FirstRender
		sum.AllDrawn += f.AllDrawn
		sum.LoadLongest = max(sum.LoadLongest, f.LoadLongest)
		sum.ScrollLong = max(sum.ScrollLong, f.ScrollLong)
		sum.ScrollFrame = max(sum.ScrollFrame, f.ScrollFrame)
	}
	b.StopTimer()
	// The Long Tasks API must hear a task it is shown, or the zeros above
	// mean nothing.
	busy, err := evalJS[float64](br, 10*time.Second, `(async () => {
	  const seen = [];
	  const o = new PerformanceObserver((l) => seen.push(...l.getEntries()));
	  o.observe({ type: "longtask" });
	  setTimeout(() => { const end = performance.now() + 120; while (performance.now() < end) {} }, 0);
	  await new Promise((r) => setTimeout(r, 300));
	  o.disconnect();
	  return seen.reduce((m, e) => Math.max(m, e.duration), 0);
	})()`)
	if err != nil || busy < 100 {
		b.Fatalf("the Long Tasks API did not report a 120 ms busy loop (got %.0f ms, %v)", busy, err)
	}
	br.CheckNoJSErrors(b, "the large job's page")
	b.ReportMetric(sum.FirstRender/float64(b.N), "ms-first-render")
	b.ReportMetric(sum.AllDrawn/float64(b.N), "ms-all-drawn")
	b.ReportMetric(sum.LoadLongest, "ms-longest-task-load")
	b.ReportMetric(sum.ScrollLong, "ms-longest-task-scroll")
	b.ReportMetric(sum.ScrollFrame, "ms-longest-frame-scroll")
}

// startBenchStack runs a cluster stack in this process on the sim backend
// (500 hosts of 32 cores), serving the UI, and returns its HTTP base URL.
func startBenchStack(b *testing.B) string {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan cluster.ReadyInfo, 1)
	done := make(chan error, 1)
	cfg := cluster.Config{
		DataDir: b.TempDir(), Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Backend: "sim", Hosts: 500, HostCPU: 32, HostMemoryMB: 65536, HostDiskMB: 100000,
		ShutdownGrace: 5 * time.Second,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnReady:       func(r cluster.ReadyInfo) { ready <- r },
		UI:            ui.Handler(ui.Cluster),
	}
	go func() { done <- cluster.Run(ctx, cfg) }()
	b.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			b.Error("stack did not stop within 60s")
		}
	})
	select {
	case r := <-ready:
		return "http://" + r.HTTPAddr
	case err := <-done:
		b.Fatalf("stack did not start: %v", err)
	case <-time.After(90 * time.Second):
		b.Fatal("stack did not become ready within 90s")
	}
	return ""
}

// countTasks counts a job's tasks through the paged REST list.
func countTasks(b *testing.B, base, id string) int {
	n := 0
	token := ""
	for i := 0; i < 10; i++ {
		var page struct {
			Tasks         []struct{} `json:"tasks"`
			NextPageToken string     `json:"nextPageToken"`
		}
		restJSONB(b, "GET", fmt.Sprintf("%s/v1/jobs/%s/tasks?pageSize=5000&pageToken=%s", base, id, url.QueryEscape(token)), "", &page)
		n += len(page.Tasks)
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	return n
}

// restJSONB is restJSON for a benchmark: body (JSON or nothing) to url,
// a 200 wanted, the answer decoded into out when set.
func restJSONB(b *testing.B, method, u, body string, out any) {
	b.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("%s %s: %d %s", method, u, resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			b.Fatalf("%s %s: %v", method, u, err)
		}
	}
}
