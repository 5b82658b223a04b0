package hostagent

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/quick"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const scrapeLimit = 1 << 20

// newClient is an HTTP client of its own whose idle connections are closed
// when the test ends (the leak check in TestMain would see them).
func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// serve starts a loopback server for h, closed when the test ends.
func serve(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// serveText serves body with Content-Type ct.
func serveText(t *testing.T, ct, body string) string {
	return serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ct != "" {
			w.Header().Set("Content-Type", ct)
		} else {
			w.Header()["Content-Type"] = nil // keep net/http from sniffing one
		}
		_, _ = w.Write([]byte(body))
	}))
}

func scrape(t *testing.T, url, metric string) (Histogram, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return Scrape(ctx, newClient(t), url, metric, scrapeLimit)
}

// An instance exposing a real client_golang histogram with two series
// (code="200", code="500"): what happened before the first scrape must not
// count in the window, and both series must.
func TestScrapeP99RealHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "request_duration_seconds",
		Help:    "Request latency.",
		Buckets: []float64{0.1, 0.2, 0.5, 1},
	}, []string{"code"})
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "requests_total", Help: "Requests."})
	reg.MustRegister(lat, other)
	url := serve(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	observe := func(code string, n int, v float64) {
		for range n {
			lat.WithLabelValues(code).Observe(v)
			other.Inc()
		}
	}
	// Before the window: 20 slow requests in (0.5, 1].
	observe("200", 20, 0.7)
	h1, err := scrape(t, url, "request_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if h1.Count != 20 || !bucketsEqual(h1.Buckets, []float64{0.1, 0.2, 0.5, 1, inf}, []float64{0, 0, 0, 20, 20}) {
		t.Fatalf("first scrape = %+v", h1)
	}

	// The window: 100 requests over both series. Cumulative: 50 ≤ 0.1,
	// 90 ≤ 0.2, 100 ≤ 0.5. Rank 99 is the 9th of the 10 in (0.2, 0.5]:
	// 0.2 + 0.3 × 9/10 = 0.47.
	observe("200", 30, 0.05)
	observe("500", 20, 0.05)
	observe("200", 40, 0.15)
	observe("500", 10, 0.3)
	h2, err := scrape(t, url, "request_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if h2.Count != 120 || !bucketsEqual(h2.Buckets, []float64{0.1, 0.2, 0.5, 1, inf}, []float64{50, 90, 100, 120, 120}) {
		t.Fatalf("second scrape = %+v", h2)
	}
	if wantSum := 20*0.7 + 50*0.05 + 40*0.15 + 10*0.3; math.Abs(h2.Sum-wantSum) > 1e-9 {
		t.Errorf("Sum = %v, want %v", h2.Sum, wantSum)
	}
	p99, ok := P99(h1, h2)
	if !ok || math.Abs(p99-0.47) > 1e-9 {
		t.Errorf("P99 over the window = %v, %v; want 0.47, true", p99, ok)
	}

	// Since the start (zero prev), the 20 slow ones count: rank 118.8 is
	// the 18.8th of 20 in (0.5, 1]: 0.5 + 0.5 × 18.8/20 = 0.97.
	if p, ok := P99(Histogram{}, h2); !ok || math.Abs(p-0.97) > 1e-9 {
		t.Errorf("P99 since start = %v, %v; want 0.97, true", p, ok)
	}

	// A window with nothing in it has no P99.
	h3, err := scrape(t, url, "request_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := P99(h2, h3); ok {
		t.Errorf("P99 of an empty window = %v, true; want ok=false", p)
	}

	// Slower than every finite bucket: the answer is the highest bound.
	observe("200", 5, 3)
	h4, err := scrape(t, url, "request_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := P99(h3, h4); !ok || p != 1 {
		t.Errorf("P99 in the +Inf bucket = %v, %v; want 1, true", p, ok)
	}
}

// The instance restarts between scrapes: fewer observations than before.
func TestScrapeP99CounterReset(t *testing.T) {
	newInstance := func(n int) string {
		reg := prometheus.NewRegistry()
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lat_seconds", Help: "x", Buckets: []float64{0.1, 1}})
		reg.MustRegister(h)
		for range n {
			h.Observe(0.05)
		}
		return serve(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	}
	before, err := scrape(t, newInstance(50), "lat_seconds")
	if err != nil {
		t.Fatal(err)
	}
	after, err := scrape(t, newInstance(10), "lat_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := P99(before, after); ok {
		t.Errorf("P99 across a restart = %v, true; want ok=false", p)
	}
}

func TestScrapeBadEndpoints(t *testing.T) {
	const metric = "lat_seconds"
	validText := "# TYPE lat_seconds histogram\nlat_seconds_bucket{le=\"0.1\"} 1\nlat_seconds_bucket{le=\"+Inf\"} 2\nlat_seconds_sum 0.5\nlat_seconds_count 2\n"

	tests := []struct {
		name    string
		url     func(t *testing.T) string
		timeout time.Duration // of ctx; 5 s if 0
		limit   int64         // scrapeLimit if 0
		want    string        // in the error
		wantIs  error         // errors.Is, if set
	}{
		{
			name: "server down",
			url: func(t *testing.T) string {
				srv := httptest.NewServer(http.NotFoundHandler())
				srv.Close()
				return srv.URL
			},
			want: "connect",
		},
		{
			name:    "slow to answer",
			url:     func(t *testing.T) string { return serve(t, stall(t, false)) },
			timeout: 200 * time.Millisecond,
			wantIs:  context.DeadlineExceeded,
		},
		{
			name:    "slow body after headers",
			url:     func(t *testing.T) string { return serve(t, stall(t, true)) },
			timeout: 200 * time.Millisecond,
			wantIs:  context.DeadlineExceeded,
		},
		{
			name: "status 500",
			url: func(t *testing.T) string {
				return serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.Error(w, "boom", http.StatusInternalServerError)
				}))
			},
			want: "status 500",
		},
		{
			name: "HTML page",
			url: func(t *testing.T) string {
				return serveText(t, "text/html; charset=utf-8", "<!doctype html><html><body>Login</body></html>")
			},
			want: "not Prometheus text format",
		},
		{
			name: "HTML labelled text/plain",
			url: func(t *testing.T) string {
				return serveText(t, "text/plain; charset=utf-8", "<!doctype html><html><body>Login</body></html>")
			},
			want: "not Prometheus text format",
		},
		{
			name: "protobuf exposition",
			url: func(t *testing.T) string {
				return serveText(t, "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited", "\x00\x01")
			},
			want: "not Prometheus text format",
		},
		{
			name: "body over the limit",
			url: func(t *testing.T) string {
				return serveText(t, "text/plain; version=0.0.4", validText+strings.Repeat("# padding\n", 1000))
			},
			limit: int64(len(validText)) + 9, // one byte short of the first padding line
			want:  "larger than the limit",
		},
		{
			name: "metric missing",
			url: func(t *testing.T) string {
				return serveText(t, "text/plain; version=0.0.4", "# TYPE other_seconds histogram\nother_seconds_bucket{le=\"+Inf\"} 1\nother_seconds_sum 1\nother_seconds_count 1\n")
			},
			want: `metric "lat_seconds" not found`,
		},
		{
			name: "a counter under that name",
			url: func(t *testing.T) string {
				return serveText(t, "text/plain; version=0.0.4", "# TYPE lat_seconds counter\nlat_seconds 12\n")
			},
			want: "is a COUNTER, not a histogram",
		},
		{
			name: "untyped buckets are not a histogram family",
			url: func(t *testing.T) string {
				return serveText(t, "text/plain; version=0.0.4", "lat_seconds_bucket{le=\"+Inf\"} 1\nlat_seconds_count 1\n")
			},
			want: `metric "lat_seconds" not found`,
		},
		{
			name: "negative bucket count",
			url: func(t *testing.T) string {
				return serveText(t, "text/plain; version=0.0.4", "# TYPE lat_seconds histogram\nlat_seconds_bucket{le=\"0.1\"} -1\nlat_seconds_bucket{le=\"+Inf\"} 2\nlat_seconds_count 2\n")
			},
			want: "not Prometheus text format", // the parser refuses it already
		},
		{
			name: "NaN bucket count",
			url: func(t *testing.T) string {
				return serveText(t, "text/plain; version=0.0.4", "# TYPE lat_seconds histogram\nlat_seconds_bucket{le=\"0.1\"} NaN\nlat_seconds_bucket{le=\"+Inf\"} 2\nlat_seconds_count 2\n")
			},
			want: "is not a count",
		},
		{
			name:  "limit not positive",
			url:   func(t *testing.T) string { return serveText(t, "text/plain", validText) },
			limit: -1,
			want:  "limit must be > 0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timeout := cmpOr(tt.timeout, 5*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			h, err := Scrape(ctx, newClient(t), tt.url(t), metric, cmpOr(tt.limit, scrapeLimit))
			if err == nil {
				t.Fatalf("Scrape = %+v, want an error", h)
			}
			if tt.want != "" && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
		})
	}
}

// stall is a handler that does not finish until the client gives up (or the
// test ends): with body, after sending headers and part of the body.
func stall(t *testing.T, body bool) http.Handler {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) }) // runs before the server's Close
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if body {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = w.Write([]byte("# TYPE lat_seconds histogram\n"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-done:
		}
	})
}

func TestScrapeBodyLimitBoundary(t *testing.T) {
	text := "# TYPE lat_seconds histogram\nlat_seconds_bucket{le=\"0.1\"} 1\nlat_seconds_bucket{le=\"+Inf\"} 2\nlat_seconds_sum 0.5\nlat_seconds_count 2\n"
	url := serveText(t, "text/plain; version=0.0.4", text)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Scrape(ctx, newClient(t), url, "lat_seconds", int64(len(text))); err != nil {
		t.Errorf("body of exactly the limit: %v", err)
	}
	if _, err := Scrape(ctx, newClient(t), url, "lat_seconds", int64(len(text))-1); err == nil {
		t.Error("body one byte over the limit: no error")
	}
}

// Hand-written expositions: what small exporters send and client_golang
// never does.
func TestScrapeHandWritten(t *testing.T) {
	tests := []struct {
		name   string
		ct     string
		text   string
		bounds []float64
		counts []float64
		count  float64
	}{
		{
			name:   "no +Inf bucket: taken from _count",
			ct:     "text/plain",
			text:   "# TYPE x histogram\nx_bucket{le=\"0.1\"} 1\nx_bucket{le=\"1\"} 2\nx_sum 1.5\nx_count 3\n",
			bounds: []float64{0.1, 1, inf}, counts: []float64{1, 2, 3}, count: 3,
		},
		{
			name:   "no Content-Type, buckets out of order",
			ct:     "",
			text:   "# TYPE x histogram\nx_bucket{le=\"+Inf\"} 3\nx_bucket{le=\"1\"} 2\nx_bucket{le=\"0.1\"} 1\nx_sum 1.5\nx_count 3\n",
			bounds: []float64{0.1, 1, inf}, counts: []float64{1, 2, 3}, count: 3,
		},
		{
			name: "series with different layouts merge on the union of bounds",
			ct:   "text/plain; version=0.0.4; charset=utf-8",
			text: "# TYPE x histogram\n" +
				"x_bucket{s=\"a\",le=\"0.1\"} 1\nx_bucket{s=\"a\",le=\"0.5\"} 3\nx_bucket{s=\"a\",le=\"+Inf\"} 4\nx_sum{s=\"a\"} 1\nx_count{s=\"a\"} 4\n" +
				"x_bucket{s=\"b\",le=\"0.2\"} 2\nx_bucket{s=\"b\",le=\"0.5\"} 5\nx_bucket{s=\"b\",le=\"+Inf\"} 6\nx_sum{s=\"b\"} 1\nx_count{s=\"b\"} 6\n",
			// a: 1, 1, 3, 4 (nothing known at 0.2 beyond its 1 at 0.1); b: 0, 2, 5, 6.
			bounds: []float64{0.1, 0.2, 0.5, inf}, counts: []float64{1, 3, 8, 10}, count: 10,
		},
		{
			name:   "fractional counts",
			ct:     "text/plain",
			text:   "# TYPE x histogram\nx_bucket{le=\"1\"} 0.5\nx_bucket{le=\"+Inf\"} 1.5\nx_sum 2\nx_count 1.5\n",
			bounds: []float64{1, inf}, counts: []float64{0.5, 1.5}, count: 1.5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := scrape(t, serveText(t, tt.ct, tt.text), "x")
			if err != nil {
				t.Fatal(err)
			}
			if h.Count != tt.count || !bucketsEqual(h.Buckets, tt.bounds, tt.counts) {
				t.Errorf("Scrape = %+v, want bounds %v counts %v count %v", h, tt.bounds, tt.counts, tt.count)
			}
		})
	}
}

var inf = math.Inf(1)

// hist builds a Histogram from upper bounds and cumulative counts; the
// count is the last bucket's.
func hist(bounds []float64, counts ...float64) Histogram {
	h := Histogram{Buckets: make([]Bucket, len(bounds))}
	for i := range bounds {
		h.Buckets[i] = Bucket{UpperBound: bounds[i], Count: counts[i]}
	}
	if len(counts) > 0 {
		h.Count = counts[len(counts)-1]
	}
	return h
}

func TestP99(t *testing.T) {
	std := []float64{0.1, 0.2, 0.5, 1, inf}
	tests := []struct {
		name      string
		prev, cur Histogram
		want      float64
		ok        bool
	}{
		{
			name: "interpolates inside the bucket",
			prev: hist(std, 0, 0, 0, 20, 20), cur: hist(std, 50, 90, 100, 120, 120),
			want: 0.47, ok: true,
		},
		{
			name: "zero prev: since the start",
			cur:  hist(std, 50, 90, 100, 120, 120),
			want: 0.97, ok: true,
		},
		{
			name: "first bucket: lower bound 0",
			cur:  hist(std, 100, 100, 100, 100, 100),
			want: 0.099, ok: true,
		},
		{
			name: "rank exactly on a bucket's upper bound",
			cur:  hist(std, 99, 99, 100, 100, 100),
			want: 0.1, ok: true,
		},
		{
			name: "rank in +Inf: highest finite bound",
			prev: hist(std, 10, 10, 10, 10, 10), cur: hist(std, 10, 10, 10, 10, 110),
			want: 1, ok: true,
		},
		{
			name: "first bucket at or below zero: its bound",
			cur:  hist([]float64{0, 1, inf}, 100, 100, 100),
			want: 0, ok: true,
		},
		{
			name: "no observation in the window",
			prev: hist(std, 1, 2, 3, 4, 5), cur: hist(std, 1, 2, 3, 4, 5),
		},
		{
			name: "empty histogram",
			cur:  Histogram{},
		},
		{
			name: "counter reset: count went down",
			prev: hist(std, 50, 90, 100, 120, 120), cur: hist(std, 5, 9, 10, 12, 12),
		},
		{
			name: "counter reset hidden in the buckets: count caught up",
			prev: hist(std, 50, 90, 100, 120, 120), cur: hist(std, 10, 20, 30, 40, 130),
		},
		{
			name: "bucket layout changed",
			prev: hist([]float64{0.1, 0.25, 0.5, 1, inf}, 1, 2, 3, 4, 5), cur: hist(std, 10, 20, 30, 40, 50),
		},
		{
			name: "bucket count changed",
			prev: hist([]float64{0.1, inf}, 1, 2), cur: hist(std, 10, 20, 30, 40, 50),
		},
		{
			name: "only +Inf: nothing finite to answer with",
			cur:  hist([]float64{inf}, 10),
		},
		{
			name: "no +Inf bucket",
			cur:  hist([]float64{0.1, 1}, 10, 20),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := P99(tt.prev, tt.cur)
			if ok != tt.ok {
				t.Fatalf("P99 = %v, %v; want ok=%v", got, ok, tt.ok)
			}
			if ok && math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("P99 = %v, want %v", got, tt.want)
			}
		})
	}
}

// For any window of observations, the quantile is non-decreasing in q and
// lies within [0, highest finite bound].
func TestQuantileProperties(t *testing.T) {
	bounds := []float64{0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, inf}
	check := func(seed uint64) bool {
		rng := rand.New(rand.NewPCG(seed, 0))
		prev, cur := make([]float64, len(bounds)), make([]float64, len(bounds))
		var p, c float64
		for i := range bounds {
			p += float64(rng.IntN(5))
			c += float64(rng.IntN(50))
			prev[i], cur[i] = p, p+c // the window adds c cumulative
		}
		ph, ch := hist(bounds, prev...), hist(bounds, cur...)
		last := -1.0
		for _, q := range []float64{0.01, 0.25, 0.5, 0.9, 0.99, 0.999} {
			v, ok := quantile(q, ph, ch)
			if !ok {
				return c == 0
			}
			if v < last || v < 0 || v > 5 {
				t.Logf("seed %d: quantile(%v) = %v after %v", seed, q, v, last)
				return false
			}
			last = v
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 500}); err != nil {
		t.Error(err)
	}
}

func bucketsEqual(got []Bucket, bounds, counts []float64) bool {
	if len(got) != len(bounds) {
		return false
	}
	return slices.EqualFunc(got, bounds, func(b Bucket, ub float64) bool { return b.UpperBound == ub }) &&
		slices.EqualFunc(got, counts, func(b Bucket, c float64) bool { return math.Abs(b.Count-c) < 1e-9 })
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
