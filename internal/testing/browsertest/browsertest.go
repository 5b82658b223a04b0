// Package browsertest drives Debian's Chromium headless through chromedp
// for the tests of the web UI (v0.23's generic Action API: pin it in
// go.mod, v0.22 and before differ). `make test` installs Chromium when it
// is missing (hack/chromium.sh); a machine without it fails the browser
// tests, with the reason, unless PELOTON_SKIP_BROWSER=1 says to skip them.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// ChromiumPath finds the browser: PELOTON_CHROMIUM, else chromium on the
// PATH; it fails the test (or skips it, when told to) otherwise.
func ChromiumPath(t testing.TB) string {
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
	t.Fatal("no Chromium found: install it (`bash hack/chromium.sh`, which `make test` runs), " +
		"set PELOTON_CHROMIUM to its path, or set PELOTON_SKIP_BROWSER=1 to skip the browser tests")
	return ""
}

// Browser is one headless Chromium with one tab, collecting the page's
// JavaScript errors: uncaught exceptions, unhandled rejections,
// console.error, and browser log errors other than the network's (a
// request the API refuses logs a network error, and showing that refusal
// is the page doing its job).
type Browser struct {
	// Ctx is the tab's context, for chromedp calls of the test's own.
	Ctx context.Context

	mu   sync.Mutex
	errs []string
}

// New starts Chromium at path with a window of width × height; it stops
// when the test ends.
func New(t testing.TB, path string, width, height int) *Browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &Browser{Ctx: ctx}
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first Do starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium (%s): %v", path, err)
	}
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

// Do runs steps with a deadline.
func (b *Browser) Do(within time.Duration, steps ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(b.Ctx, within)
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

// Eval evaluates a JavaScript expression (awaiting a promise) into T.
func Eval[T any](b *Browser, within time.Duration, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.Ctx, within)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// WaitJS polls a JavaScript predicate until it is truthy, failing the
// test with what the page shows if it is not within the time.
func (b *Browser) WaitJS(t testing.TB, what, expr string, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, within+time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(within), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		text, _ := Eval[string](b, 2*time.Second, `document.querySelector("main") ? document.querySelector("main").innerText.slice(0, 1500) : ""`)
		t.Fatalf("%s: not within %s (%v); the page shows:\n%s", what, within, err, text)
	}
}

// PeekErrors returns the errors collected so far.
func (b *Browser) PeekErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// JSErrors returns and forgets the errors collected so far.
func (b *Browser) JSErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.errs
	b.errs = nil
	return e
}

// CheckNoJSErrors fails the test if any page raised a JavaScript error
// since the last check.
func (b *Browser) CheckNoJSErrors(t testing.TB, page string) {
	t.Helper()
	// Console events arrive asynchronously; give the last ones a moment.
	_, _ = Eval[bool](b, 2*time.Second, `new Promise((r) => setTimeout(() => r(true), 100))`)
	if errs := b.JSErrors(); len(errs) > 0 {
		t.Errorf("JavaScript errors on %s:\n  %s", page, strings.Join(errs, "\n  "))
	}
}
