package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/peloton-sched/peloton/cluster"
	"github.com/peloton-sched/peloton/internal/auth"
	"github.com/peloton-sched/peloton/internal/serving"
	"github.com/peloton-sched/peloton/internal/testing/browsertest"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
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
	chromium := browsertest.ChromiumPath(t)
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
	testutil.Eventually(t, 30*time.Second, "job "+jobID+" running", func() error {
		var got struct {
			Job struct{ Status struct{ State string } }
		}
		rest(t, http.MethodGet, base+"/v1/jobs/"+jobID, viewerToken, "", &got)
		if got.Job.Status.State != "JOB_RUNNING" {
			return fmt.Errorf("it is %s", got.Job.Status.State)
		}
		return nil
	})

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

// tab is one headless Chromium with one tab (internal/testing/browsertest), with
// this test's fixed waits.
type tab struct{ *browsertest.Browser }

func newTab(t *testing.T, path string) *tab { return &tab{browsertest.New(t, path, 1280, 800)} }

// do runs steps, each batch within 15s.
func (b *tab) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := b.Do(15*time.Second, steps...); err != nil {
		t.Fatal(err)
	}
}

// wait polls a JavaScript predicate until it holds, for up to 15s.
func (b *tab) wait(t *testing.T, what, expr string) {
	t.Helper()
	b.WaitJS(t, what, expr, 15*time.Second)
}

// evalJS evaluates an expression (awaiting a promise) into T.
func evalJS[T any](b *tab, expr string) (T, error) {
	return browsertest.Eval[T](b.Browser, 5*time.Second, expr)
}

// checkNoJSErrors fails the test if a page raised a JavaScript error.
func (b *tab) checkNoJSErrors(t *testing.T) {
	t.Helper()
	b.CheckNoJSErrors(t, "the sign-in pages")
}
