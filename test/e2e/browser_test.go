package e2e

import (
	"testing"
	"time"

	"github.com/peloton-sched/peloton/internal/testing/browsertest"
)

// The browser tests drive Chromium headless through internal/testing/browsertest.

type browser = browsertest.Browser

func chromiumPath(t testing.TB) string { return browsertest.ChromiumPath(t) }

func newBrowser(t testing.TB, path string, width, height int) *browser {
	return browsertest.New(t, path, width, height)
}

func evalJS[T any](b *browser, within time.Duration, expr string) (T, error) {
	return browsertest.Eval[T](b, within, expr)
}
