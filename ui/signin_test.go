package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/serving"
	"github.com/peloton-sched/peloton/ui"
)

// The tokens of TestSignIn: vic views the whole cluster, sam submits to
// /default only (and so may not watch the cluster's event stream).
const (
	viewerToken    = "viewer-token-0123456789abcdef"
	submitterToken = "submitter-token-0123456789abcdef"
)

// TestSignIn drives the web UI in headless Chromium against a real cluster
// stack (sim backend) that wants bearer tokens and has a policy: the page
// first shows the sign-in form; a wrong token shows the server's refusal
// and is not kept; the viewer's token shows the jobs page with a job made
// through the API, keeps the session over a reload (sessionStorage, not
// localStorage), tails a task's log and is live through the event stream
// read with fetch(); the viewer's kill of the job shows the server's 403
// where the page shows errors and signs nobody out; the submitter's token,
// which may not watch the cluster's stream, polls; "Sign out" returns to
// the form; a stored token the server no longer takes is forgotten and the
// form says why. No page raises a JavaScript error.
func TestSignIn(t *testing.T) {
	chromium := chromiumPath(t)
	base := startSecuredStack(t)

	// The API itself wants the token: without it, 401 and the challenge.
	resp, err := http.Get(base + "/v1/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("GET /v1/jobs without a token: %d %q, want 401 with a Bearer challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	var created struct{ JobID string }
	rest(t, http.MethodPost, base+"/v1/jobs?requestId=signin-job", submitterToken,
		`{"name":"signin-job","type":"BATCH","pool":"/default","instanceCount":1,"defaultSpec":{"command":["sleep","600"],"resources":{"cpu":0.1,"memoryMb":16}}}`, &created)
	jobID := created.JobID
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got struct {
			Job struct{ Status struct{ State string } }
		}
		rest(t, http.MethodGet, base+"/v1/jobs/"+jobID, viewerToken, "", &got)
		if got.Job.Status.State == "JOB_RUNNING" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %s, not running, after 30s", jobID, got.Job.Status.State)
		}
		time.Sleep(100 * time.Millisecond)
	}

	b := newTab(t, chromium)
	signIn := func(token string) {
		t.Helper()
		b.do(t, chromedp.Evaluate[chromedp.Void](`document.querySelector("#signin-token").value = ""`),
			chromedp.SendKeys(chromedp.CSS(`#signin-token`), token),
			chromedp.Click(chromedp.CSS(`[data-action="sign-in"]`)))
	}
	const form = `document.body.dataset.auth === "signin" && document.querySelector("main form.signin input[type=password]")`
	const stored = `sessionStorage.getItem("peloton.token")`
	jobShown := `document.body.dataset.ready === "/ui/jobs" && document.body.dataset.auth === "token" && !document.querySelector("form.signin") && ` +
		`document.querySelector('main a[href="/ui/jobs/` + jobID + `"]')`

	// A first visit: the form, with its labelled password field, and no page.
	b.do(t, chromedp.Navigate(base+"/ui/jobs"))
	b.wait(t, "the sign-in form", form+` && document.activeElement.id === "signin-token"`)
	b.wait(t, "a labelled field, no error, no sign-out, nothing of the page",
		`document.querySelector("#signin-token").labels[0]?.textContent.includes("API token") && `+
			`!document.querySelector("form.signin .error") && document.querySelector("#signout").hidden && `+
			`!document.querySelector("main table") && document.title === "Sign in · Peloton"`)

	// A wrong token: the server's words, nothing kept, and the token left
	// in the field to be corrected.
	signIn("not-a-token-the-server-knows")
	b.wait(t, "the refusal of a wrong token", form+` && document.querySelector("form.signin .error")?.textContent.includes("the bearer token is not valid") && `+
		stored+` === null && document.querySelector("#signin-token").value === "not-a-token-the-server-knows"`)

	// The viewer's token: the jobs page and its job; the token in this
	// tab's sessionStorage only.
	signIn(viewerToken)
	b.wait(t, "the jobs page with the job", jobShown+` && `+stored+` === "`+viewerToken+`" && localStorage.length === 0 && !document.querySelector("#signout").hidden`)
	// The stream is read with the token: the page goes live.
	b.wait(t, "the page live", `document.querySelector("#live").dataset.mode === "live"`)

	// A reload keeps the session.
	b.do(t, chromedp.Reload())
	b.wait(t, "the jobs page again after a reload", jobShown)

	// The event stream alone (?nopoll) brings a new job to the page.
	b.do(t, chromedp.Navigate(base+"/ui/jobs?nopoll"))
	b.wait(t, "the jobs page live without polling", jobShown+` && document.querySelector("#live").dataset.mode === "live"`)
	rest(t, http.MethodPost, base+"/v1/jobs?requestId=signin-job-2", submitterToken,
		`{"name":"signin-second","type":"BATCH","pool":"/default","instanceCount":1,"defaultSpec":{"command":["sleep","600"],"resources":{"cpu":0.1,"memoryMb":16}}}`, nil)
	b.wait(t, "the second job, shown through the stream", `document.querySelector("main").innerText.includes("signin-second")`)

	// The task's log is fetched with the token too.
	b.do(t, chromedp.Navigate(base+"/ui/jobs/"+jobID+"/tasks/0"))
	b.wait(t, "the task's log", `document.querySelector("pre.log") && document.querySelector("pre.log").textContent.includes("sim: sleep 600")`)

	// The viewer may not kill the job: the 403's message where the page
	// shows errors, still signed in.
	b.do(t, chromedp.Navigate(base+"/ui/jobs/"+jobID))
	b.wait(t, "the kill button", `document.querySelector('[data-action="kill-job"]:not([disabled])')`)
	b.do(t, chromedp.Click(chromedp.CSS(`[data-action="kill-job"]`)), chromedp.Click(chromedp.CSS(`[data-action="kill-job"]`)))
	const denied = "needs the submitter role on pool /default, which vic does not hold"
	b.wait(t, "the 403 shown, still signed in",
		`document.querySelector(".flash .error") && document.querySelector(".flash .error").textContent.includes("permission denied") && `+
			`document.querySelector(".flash .error").textContent.includes("`+denied+`") && `+
			`document.body.dataset.auth === "token" && `+stored+` === "`+viewerToken+`"`)

	// Sign out: the form, the token gone.
	b.do(t, chromedp.Click(chromedp.CSS(`#signout`)))
	b.wait(t, "the form after signing out", form+` && `+stored+` === null && document.querySelector("form.signin .notice") && document.querySelector("#signout").hidden`)

	// The submitter's token: its jobs, and polling, since the cluster's
	// stream (viewer role cluster-wide) is refused - a 403 is no sign-out.
	b.do(t, chromedp.Navigate(base+"/ui/jobs"))
	b.wait(t, "the sign-in form again", form)
	signIn(submitterToken)
	b.wait(t, "the submitter's jobs page", jobShown)
	// A poll has run (the stream, had it connected, would have within
	// milliseconds, and then the page would not poll for 30s).
	b.wait(t, "the submitter's page polling, still signed in", `Number(document.body.dataset.refreshes) >= 1 && `+
		`document.querySelector("#live").dataset.mode === "polling" && document.body.dataset.auth === "token"`)

	// A stored token the server does not take (revoked, say): forgotten,
	// and the form says why.
	if _, err := evalJS[bool](b, `sessionStorage.setItem("peloton.token", "revoked-token-0123456789abcdef"), true`); err != nil {
		t.Fatal(err)
	}
	b.do(t, chromedp.Reload())
	b.wait(t, "the form with the server's refusal of the stored token",
		form+` && document.querySelector("form.signin .error")?.textContent.includes("the bearer token is not valid") && `+stored+` === null`)

	b.checkNoJSErrors(t)
}

// startSecuredStack runs a cluster stack on the sim backend that wants
// the tokens above and grants vic the viewer role cluster-wide and sam the
// submitter role on /default; it returns the HTTP base URL.
func startSecuredStack(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	policy := filepath.Join(dir, "policy.yaml")
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(tokens, fmt.Sprintf("- {token: %q, principal: vic}\n- {token: %q, principal: sam}\n", viewerToken, submitterToken))
	write(policy, "- {principal: vic, role: viewer}\n- {principal: sam, role: submitter, pools: [\"/default/**\"]}\n")

	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan cluster.ReadyInfo, 1)
	done := make(chan error, 1)
	go func() {
		done <- cluster.Run(ctx, cluster.Config{DataDir: filepath.Join(dir, "data"), Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
			EtcdListen: "127.0.0.1:0", Backend: "sim", Hosts: 1, HostCPU: 4, HostMemoryMB: 4096, DefaultReservesHosts: true,
			ShutdownGrace: 5 * time.Second, UI: ui.Handler(ui.Cluster),
			Security: serving.Security{Auth: auth.Config{TokenFile: tokens, PolicyFile: policy}},
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnReady:  func(r cluster.ReadyInfo) { ready <- r }})
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the stack stopped with: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the stack did not stop within 30s")
		}
	})
	select {
	case r := <-ready:
		return "http://" + r.HTTPAddr
	case err := <-done:
		t.Fatalf("cluster.Run: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the stack did not serve within 60s")
	}
	return ""
}

// rest makes one REST call with a bearer token, wants 200, and decodes the
// answer into out (if not nil).
func rest(t *testing.T, method, url, token, body string, out any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	}
}

// chromiumPath finds the browser as test/e2e does: PELOTON_CHROMIUM, else
// chromium on the PATH (hack/chromium.sh installs it); PELOTON_SKIP_BROWSER=1
// skips, and a machine without it fails with the reason.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if os.Getenv("PELOTON_SKIP_BROWSER") == "1" {
		t.Skip("PELOTON_SKIP_BROWSER=1: browser tests skipped")
	}
	if p := os.Getenv("PELOTON_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found: install it (`bash hack/chromium.sh`), set PELOTON_CHROMIUM to its path, " +
		"or set PELOTON_SKIP_BROWSER=1 to skip the browser tests")
	return ""
}

// tab is one headless Chromium with one tab, collecting the page's
// JavaScript errors other than the network's (a refused request logs one,
// and showing that refusal is the page's job).
type tab struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newTab(t *testing.T, path string) *tab {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800))
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first Do starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium (%s): %v", path, err)
	}
	b := &tab{ctx: ctx}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || (m.Type == chromedp.ConsoleError && m.Source != "network") {
				b.mu.Lock()
				b.errs = append(b.errs, fmt.Sprintf("%s (%s:%d)", m.Text, m.URL, m.Line+1))
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// do runs steps, each batch within 15s.
func (b *tab) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// wait polls a JavaScript predicate until it holds, for up to 15s.
func (b *tab) wait(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 16*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingTimeout(15*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		text, _ := evalJS[string](b, `document.querySelector("main") ? document.querySelector("main").innerText.slice(0, 1500) : ""`)
		t.Fatalf("%s: not within 15s (%v); the page shows:\n%s", what, err, text)
	}
}

// evalJS evaluates an expression (awaiting a promise) into T.
func evalJS[T any](b *tab, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// checkNoJSErrors fails the test if a page raised a JavaScript error.
func (b *tab) checkNoJSErrors(t *testing.T) {
	t.Helper()
	// Console events arrive asynchronously; give the last ones a moment.
	_, _ = evalJS[bool](b, `new Promise((r) => setTimeout(() => r(true), 100))`)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errs) > 0 {
		t.Errorf("JavaScript errors:\n  %s", strings.Join(b.errs, "\n  "))
	}
}
