package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// uiStack is a `peloton up` process (the real binary): one cluster and
// the federation, each serving the web UI on its HTTP port.
type uiStack struct {
	cmd          *exec.Cmd
	cluster, fed string // HTTP base URLs
}

func startUIStack(t *testing.T, bin string, extra ...string) *uiStack {
	t.Helper()
	// Every host in one partition, default, as the pages' checks and
	// screenshots expect (from two hosts up would split them otherwise).
	args := append([]string{"up", "--data-dir", t.TempDir(), "--hosts", "3", "--partitions", "default=3", "--host-cpu", "4", "--host-memory-mb", "4096",
		"--listen", freePort(t), "--http-listen", freePort(t),
		"--federation-listen", freePort(t), "--federation-http-listen", freePort(t), "--log-level", "warn"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &uiStack{cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	httpOf := func(line string) string {
		f := strings.Fields(line)
		for i := range f {
			if f[i] == "http" && i+1 < len(f) {
				return strings.TrimSuffix(f[i+1], ",")
			}
		}
		return ""
	}
	deadline := time.After(90 * time.Second)
	for s.cluster == "" || s.fed == "" {
		select {
		case l := <-lines:
			switch {
			case strings.HasPrefix(l, "peloton is ready: "):
				s.cluster = httpOf(l)
			case strings.HasPrefix(l, "peloton federation is ready: "):
				s.fed = httpOf(l)
			}
		case <-deadline:
			t.Fatal("peloton up did not print both ready lines within 90s")
		}
	}
	return s
}

// getJSON reads one REST answer into a generic map.
func getJSON(t *testing.T, url string) map[string]any {
	t.Helper()
	var out map[string]any
	restJSON(t, http.MethodGet, url, "", http.StatusOK, &out)
	return out
}

// dig walks a decoded JSON value by keys and indexes.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

// TestUI drives the web UI in headless Chromium against a real `peloton
// up` with pools, a batch job, a service under a paused update, a drained
// host, a host moved to another partition with a reason, the host advisor
// in observe mode (so hosts have zones), a global pool, a federated
// service with a paused rollout and a federated job: every page shows the
// real objects (the partitions page the advisor's status, the move with
// its reason and the partitions' sizes over time); resume/pause of the
// update and of the rollout, a task kill, a scale, completing maintenance
// and a pool edit change them (each checked through the API); a host
// moving between partitions is counted as moving, offers "Cancel move"
// and returns to its partition when cancelled; a host's page lists its
// tasks; a refused
// pool shows the API's message next to its field; keyboard shortcuts
// work; pages are live (the server's event stream, not polling, shows a
// new pool); no page raises a JavaScript error; and each page's screenshot
// is written to docs/ui/.
func TestUI(t *testing.T) {
	chromium := chromiumPath(t)
	bin := buildPeloton(t)
	// The advisor's rounds and the host agents' reports come quickly, so
	// the hosts have zones by the time their pages are opened.
	st := startUIStack(t, bin, "--advisor-mode", "observe", "--advisor-interval", "200ms", "--host-agent-interval", "500ms")
	c, f := st.cluster, st.fed

	// A host moved to its own partition before any work lands on it, so
	// the move is DONE at once and the history has one step.
	const moveReason = "ui test: local-1 serves the web tier"
	restJSON(t, "POST", c+"/v1/hosts/local-1:move", `{"partition":"stateless","reason":"`+moveReason+`"}`, 200, nil)
	testutil.Eventually(t, 20*time.Second, "local-1's move DONE", func() error {
		if s := dig(getJSON(t, c+"/v1/partitions/moves?host=local-1"), "moves", 0, "state"); s != "DONE" {
			return fmt.Errorf("the move is %v", s)
		}
		return nil
	})

	// The objects the pages must show.
	restJSON(t, "POST", c+"/v1/pools/org?requestId=ui-org", `{"reservation":{"cpu":4,"memoryMb":4096},"limit":{"cpu":8,"memoryMb":8192}}`, 200, nil)
	restJSON(t, "POST", c+"/v1/pools/org/batch?requestId=ui-batch", `{"reservation":{"cpu":2,"memoryMb":2048},"limit":{"cpu":6}}`, 200, nil)
	restJSON(t, "POST", c+"/v1/pools/org/web?requestId=ui-web", `{"reservation":{"cpu":2,"memoryMb":2048}}`, 200, nil)
	var created struct{ JobID string }
	restJSON(t, "POST", c+"/v1/jobs?requestId=ui-etl", `{"name":"nightly-etl","type":"BATCH","pool":"/org/batch","instanceCount":24,
		"labels":{"owner":"data-team"},"defaultSpec":{"command":["sh","-c","echo hello from instance $PELOTON_INSTANCE_ID; echo warn >&2; exec sleep 600"],
		"resources":{"cpu":0.1,"memoryMb":32}}}`, 200, &created)
	batchID := created.JobID
	svcSpec := func(sleep int) string {
		return fmt.Sprintf(`{"name":"web-frontend","type":"SERVICE","pool":"/org/web","instanceCount":3,"labels":{"owner":"web-team"},
			"defaultSpec":{"command":["sleep","%d"],"resources":{"cpu":0.1,"memoryMb":32}}}`, sleep)
	}
	restJSON(t, "POST", c+"/v1/jobs?requestId=ui-web", svcSpec(3600), 200, &created)
	svcID := created.JobID
	testutil.Eventually(t, 60*time.Second, "both jobs running", func() error {
		for _, id := range []string{batchID, svcID} {
			if s := dig(getJSON(t, c+"/v1/jobs/"+id), "job", "status", "state"); s != "JOB_RUNNING" {
				return fmt.Errorf("job %s is %v", id, s)
			}
		}
		return nil
	})
	var upd struct{ Update struct{ ID string } }
	restJSON(t, "POST", c+"/v1/jobs/"+svcID+"/updates", `{"spec":`+svcSpec(3601)+`,"updateSpec":{"batchSize":1,"minReadySeconds":300,"startPaused":true}}`, 200, &upd)
	updateID := upd.Update.ID
	restJSON(t, "POST", c+"/v1/hosts:startMaintenance", `{"hosts":["local-2"]}`, 200, nil)
	// The federation's objects: a global pool and a federated service with
	// a paused rollout.
	testutil.Eventually(t, 30*time.Second, "cluster registered READY", func() error {
		if s := dig(getJSON(t, f+"/v1/federation/clusters"), "clusters", 0, "state"); s != "CLUSTER_READY" {
			return fmt.Errorf("cluster is %v", s)
		}
		return nil
	})
	restJSON(t, "POST", f+"/v1/federation/pools/shared?requestId=ui-shared", `{"reservation":{"cpu":1}}`, 200, nil)
	var fsvc struct{ ServiceID string }
	fedJob := func(sleep int) string {
		return fmt.Sprintf(`{"name":"global-api","type":"SERVICE","pool":"/default","instanceCount":2,"defaultSpec":{"command":["sleep","%d"],"resources":{"cpu":0.1,"memoryMb":16}}}`, sleep)
	}
	restJSON(t, "POST", f+"/v1/federation/services?requestId=ui-fsvc", `{"job":`+fedJob(3600)+`}`, 200, &fsvc)
	testutil.Eventually(t, 60*time.Second, "federated service running", func() error {
		s := getJSON(t, f+"/v1/federation/services/"+fsvc.ServiceID)
		if r := dig(s, "service", "running"); r != float64(2) {
			return fmt.Errorf("running %v", r)
		}
		return nil
	})
	restJSON(t, "PUT", f+"/v1/federation/services/"+fsvc.ServiceID, `{"job":`+fedJob(3601)+`,"rollout":{"startPaused":true,"update":{"minReadySeconds":300}}}`, 200, nil)
	restJSON(t, "POST", f+"/v1/federation/jobs?requestId=ui-fjob", `{"job":{"name":"report-builder","pool":"/default","instanceCount":1,
		"defaultSpec":{"command":["true"],"resources":{"cpu":0.1,"memoryMb":16}}}}`, 200, nil)

	b := newBrowser(t, chromium, 1280, 800)
	if err := b.Do(10*time.Second, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
	shots := repoPath("docs/ui")
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	// visit opens a page by its deep link, waits until the app rendered it
	// and cond holds, checks for JavaScript errors, and takes a screenshot.
	load := func(name, url, what, cond string) {
		t.Helper()
		if err := b.Do(20*time.Second, chromedp.Navigate(url)); err != nil {
			t.Fatalf("%s: open %s: %v", name, url, err)
		}
		// Generous: the whole suite shares two cores with this browser.
		b.WaitJS(t, name+": "+what, `document.body.dataset.ready && (`+cond+`)`, 45*time.Second)
	}
	visit := func(name, url, what, cond string) {
		t.Helper()
		load(name, url, what, cond)
		shot(t, b, filepath.Join(shots, name+".png"))
		b.CheckNoJSErrors(t, name)
	}
	text := func(s string) string { return fmt.Sprintf(`document.querySelector("main").innerText.includes(%q)`, s) }

	// Cluster pages.
	visit("overview", c+"/", "hosts, capacity, tasks, the running update",
		text("3 hosts")+` && (`+text("DRAINING")+` || `+text("DRAINED")+`) && `+text(updateID)+` && `+text("RUNNING"))
	visit("pools", c+"/ui/pools", "the pool tree with bars",
		`document.querySelector('[data-path="/org/batch"] .bar') && document.querySelector('[data-path="/org/web"]')`)
	visit("jobs", c+"/ui/jobs", "both jobs", text("nightly-etl")+` && `+text("web-frontend")+` && `+text("data-team"))
	// The filter narrows the list.
	if err := b.Do(10*time.Second, chromedp.SendKeys(chromedp.CSS(`input[name=name]`), "nightly")); err != nil {
		t.Fatal(err)
	}
	b.WaitJS(t, "jobs filtered by name", text("nightly-etl")+` && !`+text("web-frontend"), 10*time.Second)
	visit("job", c+"/ui/jobs/"+batchID, "the instance grid and versions",
		`document.querySelector(".grid canvas") && `+text("RUNNING 24")+` && `+text("Spec versions")+` && `+text("created"))
	if err := b.Do(10*time.Second, chromedp.SetValue(chromedp.CSS(`input[aria-label="Go to instance"]`), "3"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('input[aria-label="Go to instance"]').dispatchEvent(new Event("change"))`)); err != nil {
		t.Fatal(err)
	}
	b.WaitJS(t, "instance 3's runs", text("Instance 3")+` && document.querySelector(".instance table")`, 10*time.Second)
	shot(t, b, filepath.Join(shots, "job-instance.png"))

	// The task page tails the log, and its kill button kills the task.
	visit("task", c+"/ui/jobs/"+batchID+"/tasks/0", "the run and its live log", `document.querySelector("pre.log").textContent.includes("hello from instance 0")`)
	if err := b.Do(10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="kill-task-0"]`))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "instance 0 killed through the UI", func() error {
		if s := dig(getJSON(t, c+"/v1/jobs/"+batchID+"/tasks/0"), "task", "status", "state"); s != "KILLED" {
			return fmt.Errorf("instance 0 is %v", s)
		}
		return nil
	})
	b.WaitJS(t, "the task page shows KILLED", `document.querySelector(".instance, main").innerText.includes("KILLED")`, 10*time.Second)
	b.CheckNoJSErrors(t, "task after kill")

	// Updates: resume, then pause, each checked through the API.
	visit("updates", c+"/ui/updates", "the paused update", `document.querySelector('[data-update="`+updateID+`"][data-state="UPDATE_PAUSED"]')`)
	updateState := func() any { return dig(getJSON(t, c+"/v1/updates/"+updateID), "update", "status", "state") }
	if err := b.Do(10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="resume-`+updateID+`"]`))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "update resumed through the UI", func() error {
		if s := updateState(); s != "UPDATE_ROLLING_FORWARD" {
			return fmt.Errorf("update is %v", s)
		}
		return nil
	})
	b.WaitJS(t, "the page shows the update rolling", `document.querySelector('[data-update="`+updateID+`"][data-state="UPDATE_ROLLING_FORWARD"] [data-action="pause-`+updateID+`"]:not([disabled])')`, 10*time.Second)
	if err := b.Do(10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="pause-`+updateID+`"]`))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "update paused through the UI", func() error {
		if s := updateState(); s != "UPDATE_PAUSED" {
			return fmt.Errorf("update is %v", s)
		}
		return nil
	})
	b.WaitJS(t, "the page shows the update paused", `document.querySelector('[data-update="`+updateID+`"][data-state="UPDATE_PAUSED"]')`, 10*time.Second)
	b.CheckNoJSErrors(t, "updates after pause/resume")
	visit("update", c+"/ui/updates/"+updateID, "the update's batches", `document.querySelector(".batches") && `+text("Batch size"))

	// Scale the batch job from its page: 24 to 26 instances.
	load("job-scale", c+"/ui/jobs/"+batchID, "the job's actions", `document.querySelector('[data-action="scale-job"]')`)
	if err := b.Do(10*time.Second, chromedp.SetValue(chromedp.CSS(`input[aria-label="Instance count"]`), "26"),
		chromedp.Click(chromedp.CSS(`[data-action="scale-job"]`))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "job scaled to 26 through the UI", func() error {
		if n := dig(getJSON(t, c+"/v1/jobs/"+batchID), "job", "spec", "instanceCount"); n != float64(26) {
			return fmt.Errorf("instanceCount %v", n)
		}
		return nil
	})
	b.CheckNoJSErrors(t, "job after scale")

	visit("hosts", c+"/ui/hosts", "the drained host, the partitions and the advisor's zones",
		`document.querySelector('[data-host="local-2"]') && /HOST_DRAIN/.test(document.querySelector('[data-host="local-2"]').dataset.state) && `+text("Partitions")+` && `+text("default")+
			` && document.querySelector('[data-host="local-0"] .zone:not(.z-unknown)') && document.querySelector('a[href="/ui/partitions"]')`+
			// The maintenance column: the first clause, the whole message on hover.
			` && (() => { const m = document.querySelector('[data-host="local-2"] .maint'); return m && /^drain/.test(m.textContent) && !m.textContent.includes(";") && m.title.startsWith(m.textContent) && m.title.length >= m.textContent.length; })()`)

	visit("host", c+"/ui/hosts/local-1", "one host's details, zone and moves", text("Host local-1")+` && `+text("Labels")+` && `+text("peloton.io/backend=local")+
		` && document.querySelector(".kv .zone:not(.z-unknown)") && `+text("Oversubscription")+` && document.querySelector('[data-move="local-1"][data-state="DONE"]') && `+text(moveReason)+` && [...document.querySelectorAll("main h2")].some((h) => h.textContent === "Tasks")`)

	// The partitions: the advisor observes, the move with its reason, the
	// sizes over time with the move as a step.
	visit("partitions", c+"/ui/partitions", "the partitions, the advisor and the move",
		`document.querySelector('tr[data-partition="stateless"]') && document.querySelector('tr[data-partition="default"] .zone:not(.z-unknown)') && `+
			`document.querySelector('.advisor[data-mode="observe"]') && document.querySelector('[data-move="local-1"][data-state="DONE"]') && `+text(moveReason)+
			` && document.querySelector('svg.steps[data-moves="1"] path[data-partition="stateless"]')`)
	if _, err := evalJS[bool](b, 5*time.Second, `document.querySelector("table.moves").scrollIntoView({block: "center"}), true`); err != nil {
		t.Fatal(err)
	}
	shot(t, b, filepath.Join(shots, "partitions-moves.png"))
	if err := b.Do(10*time.Second, chromedp.SendKeys(chromedp.CSS(`input[name=host]`), "local-0")); err != nil {
		t.Fatal(err)
	}
	b.WaitJS(t, "the moves filtered by host", `location.search === "?host=local-0" && `+text("0 moves of local-0")+` && !document.querySelector("[data-move]")`, 10*time.Second)
	b.CheckNoJSErrors(t, "partitions filtered")
	// The sizes over time, from a history with every kind of move: only
	// DONE moves shift a host; steps are oldest first and end now.
	steps, err := evalJS[string](b, 5*time.Second, `import("/ui/assets/partitions.js").then((m) => JSON.stringify(m.sizesOverTime({a: 2, b: 1}, [
		{host: "h2", from: "a", to: "b", state: "OBSERVED", time: "2026-01-01T00:00:04Z"},
		{host: "h1", from: "b", to: "a", state: "DONE", time: "2026-01-01T00:00:03Z"},
		{host: "h4", from: "a", to: "b", state: "MOVING", time: "2026-01-01T00:00:02.500Z"},
		{host: "h1", from: "a", to: "b", state: "SUPERSEDED", time: "2026-01-01T00:00:02Z"},
		{host: "h3", from: "a", to: "b", state: "DONE", time: "2026-01-01T00:00:01Z"}], Date.parse("2026-01-01T00:00:10Z")).map((s) => [s.t, s.sizes])))`)
	if err != nil {
		t.Fatal(err)
	}
	ms := func(sec int) int64 { return time.Date(2026, 1, 1, 0, 0, sec, 0, time.UTC).UnixMilli() }
	if want := fmt.Sprintf(`[[%d,{"a":2,"b":1}],[%d,{"a":1,"b":2}],[%d,{"a":2,"b":1}],[%d,{"a":2,"b":1}]]`, ms(1), ms(1), ms(3), ms(10)); steps != want {
		t.Errorf("sizesOverTime:\n got %s\nwant %s", steps, want)
	}
	load("hosts-again", c+"/ui/hosts", "the host table", `document.querySelector('[data-host="local-2"]')`)

	// Complete the drained host's maintenance from the hosts page.
	if err := b.Do(10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="complete-local-2"]`))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "local-2 back up through the UI", func() error {
		for _, h := range dig(getJSON(t, c+"/v1/hosts"), "hosts").([]any) {
			if dig(h, "name") == "local-2" && dig(h, "state") != "HOST_UP" {
				return fmt.Errorf("local-2 is %v", dig(h, "state"))
			}
		}
		return nil
	})
	b.WaitJS(t, "the hosts page shows local-2 up", `document.querySelector('[data-host="local-2"][data-state="HOST_UP"]')`, 10*time.Second)
	b.CheckNoJSErrors(t, "hosts after maintenance")
	uiMovingHost(t, b, c, load)

	// Edit a pool: /org/web gets a CPU limit.
	visit("pool-edit", c+"/ui/pools/org/web", "the edit form of /org/web", `document.querySelector("form.poolform input[name=path]").value === "/org/web"`)
	if err := b.Do(10*time.Second, chromedp.SendKeys(chromedp.CSS(`input[name="spec.limit.cpu"]`), "6"),
		chromedp.Click(chromedp.CSS(`[data-action="save-pool"]`))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "/org/web's limit set through the UI", func() error {
		if v := dig(getJSON(t, c+"/v1/pools/org/web"), "pool", "spec", "limit", "cpu"); v != float64(6) {
			return fmt.Errorf("limit.cpu %v", v)
		}
		return nil
	})
	b.CheckNoJSErrors(t, "pool edit")

	// A refused pool: the API's message appears next to its field.
	visit("pool-form", c+"/ui/pools", "the tree", `document.querySelector('[data-path="/org"]')`)
	if err := b.Do(10*time.Second,
		chromedp.Click(chromedp.CSS(`[data-action="new-pool"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=path]`), "org/bad"),
		chromedp.SendKeys(chromedp.CSS(`input[name="spec.reservation.cpu"]`), "3"),
		chromedp.SendKeys(chromedp.CSS(`input[name="spec.limit.cpu"]`), "1"),
		chromedp.Click(chromedp.CSS(`[data-action="save-pool"]`))); err != nil {
		t.Fatal(err)
	}
	b.WaitJS(t, "the validation error next to spec.limit.cpu",
		`(() => { const i = document.querySelector('input[name="spec.limit.cpu"]'); const n = i.closest("label").nextElementSibling;
		  return i.getAttribute("aria-invalid") === "true" && n && n.classList.contains("fielderror") && n.textContent.startsWith("spec.limit.cpu: "); })()`, 10*time.Second)
	shot(t, b, filepath.Join(shots, "pool-validation.png"))
	b.CheckNoJSErrors(t, "pool form")
	// A job that does not exist: the page says so.
	visit("not-found", c+"/ui/jobs/00000000-0000-0000-0000-000000000000", "the API's not-found message",
		`document.querySelector("main .error") && document.querySelector("main .error").innerText.includes("not found")`)
	visit("clusters-on-cluster", c+"/ui/clusters", "the link to the federation's UI",
		`document.querySelector('a[data-federation="ui"]') && document.querySelector('a[data-federation="ui"]').href === `+fmt.Sprintf("%q", f+"/"))

	// Live: with polling off (?nopoll), a pool created through the API
	// appears on the pools page only because the server's event stream
	// said something changed.
	isLive := `document.getElementById("live").dataset.mode === "live" && document.getElementById("live").textContent.startsWith("live")`
	load("pools-live", c+"/ui/pools?nopoll", "the tree, live", `document.querySelector('[data-path="/org/web"]') && `+isLive)
	restJSON(t, "POST", c+"/v1/pools/live?requestId=ui-live", `{"limit":{"cpu":1}}`, 200, nil)
	b.WaitJS(t, "the new pool, shown through the event stream", `document.querySelector('[data-path="/live"]') && `+isLive, 20*time.Second)
	b.CheckNoJSErrors(t, "pools live")

	// Fallback: with every stream the server allows taken, a page polls
	// (and says so); once streams are free it is live again by itself.
	// First the browser leaves, and the server sees its stream end (the
	// gauge counts the streams of both servers of this process).
	if err := b.Do(10*time.Second, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "no event stream open", func() error {
		resp, err := http.Get(c + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if !strings.Contains(string(body), "\npeloton_ui_event_streams 0\n") {
			return fmt.Errorf("peloton_ui_event_streams is not 0")
		}
		return nil
	})
	streamsCtx, freeStreams := context.WithCancel(context.Background())
	defer freeStreams()
	for i, refused := 0, false; !refused; i++ {
		if i > 300 {
			t.Fatal("no stream refused after 300")
		}
		req, _ := http.NewRequestWithContext(streamsCtx, http.MethodGet, c+"/v1/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if refused = resp.StatusCode == http.StatusServiceUnavailable; refused {
			resp.Body.Close()
		}
	}
	load("jobs-polling", c+"/ui/jobs", "the jobs, polling", text("nightly-etl")+
		` && document.getElementById("live").dataset.mode === "polling" && Number(document.body.dataset.refreshes) >= 1`)
	freeStreams()
	b.WaitJS(t, "the page live again once streams are free", isLive, 20*time.Second)
	// The refused stream may be logged by the browser; nothing else may.
	for _, e := range b.JSErrors() {
		if !strings.Contains(e, "EventSource") && !strings.Contains(e, "/v1/events") {
			t.Errorf("JavaScript error on the polling page: %s", e)
		}
	}

	// Federation pages.
	visit("fed-overview", f+"/", "the cluster and the rollout", text("local")+` && `+text("global-api"))
	visit("fed-clusters", f+"/ui/clusters", "the cluster's state", `document.querySelector('[data-cluster="local"]') && `+text("READY"))
	visit("fed-pools", f+"/ui/pools", "the global pool's split, its sync state in words of its own",
		text("/shared")+` && `+text("local")+` && `+text("by capacity")+` && document.querySelector('[data-sync="in-sync"]') && `+
			`![...document.querySelectorAll("main .badge")].some((b) => /READY|PENDING/.test(b.innerText))`)
	visit("fed-services", f+"/ui/services", "the federated service", text("global-api")+` && `+text("2/2"))
	visit("fed-rollouts", f+"/ui/updates", "the rollout per cluster", `document.querySelector('[data-service="`+fsvc.ServiceID+`"] .step')`)
	visit("fed-service", f+"/ui/services/"+fsvc.ServiceID, "per cluster with healthy and updated, the rollout, update and delete",
		text("Per cluster")+` && `+text("PAUSED")+` && `+text("Healthy")+` && `+text("Updated")+
			` && document.querySelector('[data-action="fupdate-`+fsvc.ServiceID+`"]') && document.querySelector('[data-action="fdelete-`+fsvc.ServiceID+`"]')`+
			` && document.querySelector("textarea.specedit").value.includes("global-api")`)
	// Update while the rollout is paused: the federation's refusal shows.
	if err := b.Do(10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="fupdate-`+fsvc.ServiceID+`"]`))); err != nil {
		t.Fatal(err)
	}
	b.WaitJS(t, "the update's refusal shown", text("has rollout"), 20*time.Second)
	// The rollout's resume and pause, checked through the federation's API.
	rollout := func() any {
		return dig(getJSON(t, f+"/v1/federation/services/"+fsvc.ServiceID), "service", "rollout", "state")
	}
	if err := b.Do(10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="fresume-`+fsvc.ServiceID+`"]`))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "rollout resumed through the UI", func() error {
		if s := rollout(); s != "ROLLOUT_ROLLING" {
			return fmt.Errorf("rollout is %v", s)
		}
		return nil
	})
	b.WaitJS(t, "the page offers pause", `document.querySelector('[data-action="fpause-`+fsvc.ServiceID+`"]:not([disabled])')`, 10*time.Second)
	if err := b.Do(10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="fpause-`+fsvc.ServiceID+`"]`))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "rollout paused through the UI", func() error {
		if s := rollout(); s != "ROLLOUT_PAUSED" {
			return fmt.Errorf("rollout is %v", s)
		}
		return nil
	})
	b.CheckNoJSErrors(t, "federated service after pause/resume")
	visit("fed-jobs", f+"/ui/jobs", "the federated job", text("report-builder"))
	// Delete, confirmed: the service is deleted through the federation's API.
	load("fed-service-delete", f+"/ui/services/"+fsvc.ServiceID, "the delete button", `document.querySelector('[data-action="fdelete-`+fsvc.ServiceID+`"]')`)
	for i := 0; i < 2; i++ { // the first click arms it, the second confirms
		if err := b.Do(10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="fdelete-`+fsvc.ServiceID+`"]`))); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 30*time.Second, "the service deleted through the UI", func() error {
		resp, err := http.Get(f + "/v1/federation/services/" + fsvc.ServiceID)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var s map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&s)
		if resp.StatusCode == http.StatusNotFound || dig(s, "service", "deleting") == true {
			return nil
		}
		return fmt.Errorf("%d, not deleting: %v", resp.StatusCode, s)
	})
	b.WaitJS(t, "the federation's pages are live", isLive, 20*time.Second)

	// A rollout gate: a service whose rollout step asks for approval; its
	// page says what the rollout waits for, and its Approve button lets
	// the rollout go on.
	var gsvc struct{ ServiceID string }
	gated := func(sleep int) string { return strings.Replace(fedJob(sleep), "global-api", "gated-api", 1) }
	restJSON(t, "POST", f+"/v1/federation/services", `{"job":`+gated(3600)+`,"rollout":{"steps":[{"clusters":["local"],"approval":true}]}}`, 200, &gsvc)
	gatedRollout := func() any {
		return dig(getJSON(t, f+"/v1/federation/services/"+gsvc.ServiceID), "service", "rollout", "state")
	}
	testutil.Eventually(t, 60*time.Second, "the gated service running", func() error {
		if r := dig(getJSON(t, f+"/v1/federation/services/"+gsvc.ServiceID), "service", "running"); r != float64(2) {
			return fmt.Errorf("running %v", r)
		}
		return nil
	})
	restJSON(t, "PUT", f+"/v1/federation/services/"+gsvc.ServiceID, `{"job":`+gated(3601)+`}`, 200, nil)
	load("fed-service-approve", f+"/ui/services/"+gsvc.ServiceID, "the rollout waiting for approval, and the Approve button",
		`document.querySelector('[data-waiting="approval"]') && `+text("Waits for approval of step 1 (clusters local)")+
			` && document.querySelector('[data-action="fapprove-`+gsvc.ServiceID+`"]')`)
	if err := b.Do(10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="fapprove-`+gsvc.ServiceID+`"]`))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the rollout approved through the UI and done", func() error {
		if s := gatedRollout(); s != "ROLLOUT_SUCCEEDED" {
			return fmt.Errorf("rollout is %v", s)
		}
		return nil
	})
	b.WaitJS(t, "the Approve button gone once approved", `!document.querySelector('[data-action="fapprove-`+gsvc.ServiceID+`"]')`, 20*time.Second)
	b.CheckNoJSErrors(t, "federated service approve")

	// A MANUAL service whose clusters change: a second registration of
	// the same stack joins, its page shows the rebalance pending with a
	// Rebalance button, and the button starts it.
	var msvc struct{ ServiceID string }
	manual := strings.Replace(fedJob(3600), "global-api", "manual-api", 1)
	restJSON(t, "POST", f+"/v1/federation/services", `{"job":`+manual+`,"placement":{"rebalance":"MANUAL"}}`, 200, &msvc)
	endpoint, _ := dig(getJSON(t, f+"/v1/federation/clusters/local"), "cluster", "endpoint").(string)
	restJSON(t, "POST", f+"/v1/federation/clusters", `{"name":"mirror","endpoint":"`+endpoint+`"}`, 200, nil)
	load("fed-service-rebalance", f+"/ui/services/"+msvc.ServiceID, "the rebalance pending, and the Rebalance button",
		`document.querySelector('[data-rebalance="pending"]') && `+text("mirror joins")+
			` && document.querySelector('[data-action="frebalance-`+msvc.ServiceID+`"]')`)
	if err := b.Do(10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="frebalance-`+msvc.ServiceID+`"]`))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the rebalance started through the UI and done", func() error {
		if s := dig(getJSON(t, f+"/v1/federation/services/"+msvc.ServiceID), "service", "rebalance", "state"); s != "REBALANCE_DONE" {
			return fmt.Errorf("rebalance is %v", s)
		}
		return nil
	})
	b.WaitJS(t, "the Rebalance button gone once started", `!document.querySelector('[data-action="frebalance-`+msvc.ServiceID+`"]')`, 20*time.Second)
	b.CheckNoJSErrors(t, "federated service rebalance")
	restJSON(t, "DELETE", f+"/v1/federation/clusters/mirror", "", 200, nil)

	// The keyboard: "g" then "c" opens the clusters page, "/" focuses the
	// job search.
	if err := b.Do(10*time.Second, chromedp.KeyEvent("g"), chromedp.KeyEvent("c")); err != nil {
		t.Fatal(err)
	}
	b.WaitJS(t, "g c opened the clusters page", `location.pathname === "/ui/clusters" && document.body.dataset.ready === "/ui/clusters"`, 10*time.Second)
	load("fed-jobs-keys", f+"/ui/jobs", "the federated jobs", text("report-builder"))
	if err := b.Do(10*time.Second, chromedp.KeyEvent("/")); err != nil {
		t.Fatal(err)
	}
	b.WaitJS(t, "/ focused the search box", `document.activeElement && document.activeElement.type === "search"`, 5*time.Second)

	// Dark theme, following the system's preference.
	dark := func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		return chromedp.Void{}, err
	}
	if err := b.Do(10*time.Second, dark); err != nil {
		t.Fatal(err)
	}
	visit("job-dark", c+"/ui/jobs/"+batchID, "the job page in the dark theme",
		`document.querySelector(".grid canvas") && getComputedStyle(document.body).backgroundColor !== "rgb(246, 247, 249)"`)

	// A narrow window: the jobs page still fits (tables scroll inside).
	if err := b.Do(10*time.Second, chromedp.EmulateViewport(420, 800)); err != nil {
		t.Fatal(err)
	}
	visit("jobs-narrow", c+"/ui/jobs", "the job list at 420 px", text("nightly-etl")+` && document.documentElement.scrollWidth <= window.innerWidth + 1`)
	visit("job-narrow", c+"/ui/jobs/"+batchID, "the job at 420 px", `document.querySelector(".grid canvas") && document.documentElement.scrollWidth <= window.innerWidth + 1`)
	visit("partitions-narrow", c+"/ui/partitions", "the partitions at 420 px",
		`document.querySelector("svg.steps path") && document.querySelector("[data-move]") && document.documentElement.scrollWidth <= window.innerWidth + 1`)

	// The collector itself: an error thrown by a page is seen.
	if _, err := evalJS[bool](b, 5*time.Second, `setTimeout(() => { throw new Error("ui-test-canary") }, 0), true`); err != nil {
		t.Fatal(err)
	}
	seen := false
	for i := 0; i < 40 && !seen; i++ {
		_, _ = evalJS[bool](b, 2*time.Second, `new Promise((r) => setTimeout(() => r(true), 50))`)
		seen = strings.Contains(strings.Join(b.PeekErrors(), "\n"), "ui-test-canary")
	}
	if !seen {
		t.Error("the console collector did not see a thrown error: the JavaScript-error checks above prove nothing")
	}
}

// shot writes a screenshot of the viewport.
func shot(t *testing.T, b *browser, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// uiMovingHost checks a host on its way to another partition: a STATEFUL
// instance keeps the move under way. The overview counts the host as
// moving, the host's page lists its task, the hosts page offers "Cancel
// move" (not "Drain") with the move in short in the maintenance column,
// and the cancel, confirmed, brings the host back to its partition.
func uiMovingHost(t *testing.T, b *browser, c string, load func(name, url, what, cond string)) {
	t.Helper()
	restJSON(t, "POST", c+"/v1/pools/db?requestId=ui-db", `{"reservation":{"cpu":0.5,"memoryMb":256,"diskMb":100}}`, 200, nil)
	var created struct{ JobID string }
	restJSON(t, "POST", c+"/v1/jobs?requestId=ui-db-job", `{"name":"ui-db","type":"STATEFUL","pool":"/db","instanceCount":1,
		"defaultSpec":{"command":["sleep","600"],"resources":{"cpu":0.1,"memoryMb":32},"volume":{"sizeMb":10}}}`, 200, &created)
	id := created.JobID
	defer restJSON(t, "POST", c+"/v1/jobs/"+id+":cancel", `{}`, 200, nil)
	var host string
	testutil.Eventually(t, 60*time.Second, "the stateful instance runs", func() error {
		tk := getJSON(t, c+"/v1/jobs/"+id+"/tasks/0")
		if s := dig(tk, "task", "status", "state"); s != "RUNNING" {
			return fmt.Errorf("instance 0 is %v", s)
		}
		host, _ = dig(tk, "task", "status", "host").(string)
		return nil
	})
	hostOf := func() any {
		for _, h := range dig(getJSON(t, c+"/v1/hosts"), "hosts").([]any) {
			if dig(h, "name") == host {
				return h
			}
		}
		t.Fatalf("host %s not listed", host)
		return nil
	}
	from, _ := dig(hostOf(), "partition").(string)
	to := "stateless"
	if from == to {
		to = "default"
	}
	restJSON(t, "POST", c+"/v1/hosts/"+host+":move", `{"partition":"`+to+`"}`, 200, nil)
	testutil.Eventually(t, 30*time.Second, host+" moving, held by the stateful instance", func() error {
		if s := dig(hostOf(), "partitionState"); s != "PARTITION_MOVING" {
			return fmt.Errorf("%s is %v", host, s)
		}
		return nil
	})
	hostsChips := `[...document.querySelectorAll("section.card")].find((s) => s.querySelector("h2").textContent === "Hosts").textContent`
	load("overview-moving", c+"/", "the moving host counted as moving", hostsChips+`.includes("MOVING 1") && `+hostsChips+`.includes("UP 2")`)
	b.CheckNoJSErrors(t, "overview with a moving host")

	row := fmt.Sprintf(`[data-host-task="%s"]`, dig(getJSON(t, c+"/v1/jobs/"+id+"/tasks/0"), "task", "taskId"))
	load("host-tasks", c+"/ui/hosts/"+host, "the host's tasks", `[...document.querySelectorAll("main h2")].some((h) => h.textContent === "Tasks")`+fmt.Sprintf(` && document.querySelector('%s a[href="/ui/jobs/%s"]').textContent === "ui-db"`, row, id)+
		fmt.Sprintf(` && document.querySelector('%s a[href="/ui/jobs/%s/tasks/0"]') && document.querySelector('%s .badge').textContent === "RUNNING"`, row, id, row))
	b.CheckNoJSErrors(t, "host tasks")

	sel := fmt.Sprintf(`[data-host=%q]`, host)
	load("hosts-moving", c+"/ui/hosts", "Cancel move offered for the moving host", fmt.Sprintf(
		`document.querySelector('%s [data-action="cancel-move-%s"]') && !document.querySelector('%s [data-action="drain-%s"]')`+
			` && document.querySelector('%s .maint').textContent.startsWith("moving to %s") && document.querySelector('%s .maint').title.includes("STATEFUL instance 0")`,
		sel, host, sel, host, sel, to, sel))
	// The first click asks for a confirmation, the second cancels; in one
	// script, so no refresh of the table comes between them.
	armed, err := evalJS[string](b, 5*time.Second, fmt.Sprintf(`(() => { const b = document.querySelector('[data-action="cancel-move-%s"]'); b.click(); const t = b.textContent; b.click(); return t; })()`, host))
	if err != nil || armed != "Confirm cancel move" {
		t.Fatalf("the first click: %q, %v; want the button to ask %q", armed, err, "Confirm cancel move")
	}
	testutil.Eventually(t, 20*time.Second, host+" back in "+from, func() error {
		h := hostOf()
		if p, s := dig(h, "partition"), dig(h, "partitionState"); p != from || s != "PARTITION_SETTLED" {
			return fmt.Errorf("%s is in %v, %v", host, p, s)
		}
		return nil
	})
	b.WaitJS(t, "the hosts page shows "+host+" back in "+from, fmt.Sprintf(
		`document.querySelector('%s [data-action="drain-%s"]') && !document.querySelector('%s [data-action="cancel-move-%s"]') && !document.querySelector('%s').innerText.includes("→")`,
		sel, host, sel, host, sel), 20*time.Second)
	b.CheckNoJSErrors(t, "hosts after the cancelled move")
}
