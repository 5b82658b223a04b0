package hostagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The agent's latency reader. Each reading, the agent scrapes every run
// whose environment declares metrics (RunInfo.Metrics) and reports the P99
// of the run's latency histogram over the window since its previous
// scrape, or why there is none (TaskUsage.latency_p99_seconds and
// latency_error). An endpoint is the tenant's code: it may be down, slow,
// huge or wrong, and none of that may delay the report by more than a
// bound, fill the agent's memory, or crash it.

// Bounds of the scrapes of one reading.
const (
	// maxConcurrentScrapes is how many endpoints are scraped at once: a
	// host with many runs is read within the timeout as long as most
	// answer quickly, and the agent opens no more connections than this.
	maxConcurrentScrapes = 8
	// maxScrapeTimeout bounds scrapeTimeout: an endpoint that has not
	// answered in two seconds is too slow to measure, whatever the
	// interval.
	maxScrapeTimeout = 2 * time.Second
	// scrapeBodyLimit is the most read of one endpoint's answer. Client
	// libraries' pages are kilobytes to a few megabytes for the largest
	// services.
	scrapeBodyLimit = 4 << 20
	// latencyErrorMax bounds a latency error in a report, in bytes: it
	// quotes what the endpoint sent, and the report is sent every interval.
	latencyErrorMax = 512
	// latencyStaleIntervals is how many intervals old the previous
	// histogram may be and still start a window: after a longer gap (the
	// endpoint failed for a while), a P99 over the whole gap would be
	// shown as the latency of the last interval.
	latencyStaleIntervals = 3
)

// errFirstReading is the latency error of a run's first scrape.
const errFirstReading = "first reading; P99 from the next one"

// scrapeTimeout is the time the scrapes of one reading may take, together:
// half an interval, so that the agent keeps its pace, at most
// maxScrapeTimeout.
func scrapeTimeout(interval time.Duration) time.Duration {
	return min(interval/2, maxScrapeTimeout)
}

// newScrapeClient is the agent's HTTP client for scraping. It requests
// exactly what a run's environment names and nothing else: no proxy (one
// in the agent's environment must not see, nor stand in for, the runs'
// endpoints) and no redirect (a 3xx is an error, not a request elsewhere
// on the tenant's say). Connections are kept between readings, one per
// endpoint, and closed when the agent stops or a run's endpoint has not
// been asked for a few intervals.
func newScrapeClient(interval time.Duration) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            (&net.Dialer{}).DialContext,
			MaxIdleConns:           0, // no bound in all; one per endpoint
			MaxIdleConnsPerHost:    1,
			IdleConnTimeout:        3 * interval,
			MaxResponseHeaderBytes: 64 << 10,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// scrapeState is what the agent keeps of one run between readings.
type scrapeState struct {
	// target is where the histogram was read; a run whose target changes
	// starts over.
	target MetricsTarget
	// prev is the last histogram read, at prevTime; have is false before
	// the first.
	prev     Histogram
	prevTime time.Time
	have     bool
	// tried is the round of the last scrape started: runs left out of a
	// round (its time ran out) go first in the next.
	tried uint64
}

// runLatency is a run's latency in one report: p99 > 0, or err.
type runLatency struct {
	p99 float64
	err string
}

// scrapeResult is one scrape's outcome.
type scrapeResult struct {
	started bool // false: the round's time ran out first
	h       Histogram
	err     error
}

// scrapeRuns scrapes the runs of infos that declare metrics and returns
// each one's latency by run id, at the reading taken at now. It forgets the
// runs gone (or without metrics any more), and returns within
// scrapeTimeout of being called, whatever the endpoints do.
func (a *Agent) scrapeRuns(ctx context.Context, infos map[string]RunInfo, now time.Time) map[string]runLatency {
	for id := range a.scrapes {
		if infos[id].Metrics == nil {
			delete(a.scrapes, id)
		}
	}
	out := make(map[string]runLatency)
	type job struct {
		id string
		st *scrapeState
	}
	var jobs []job
	for id, in := range infos {
		m := in.Metrics
		switch {
		case m == nil:
			continue
		case m.Err != "":
			delete(a.scrapes, id)
			out[id] = runLatency{err: limitError(m.Err)}
			continue
		}
		st := a.scrapes[id]
		if st == nil || st.target != *m {
			st = &scrapeState{target: *m}
			a.scrapes[id] = st
		}
		jobs = append(jobs, job{id, st})
	}
	if len(jobs) == 0 {
		return out
	}
	a.round++
	// The least recently tried first: when the round's time runs out, it
	// runs out for different runs each time, not always for the same.
	slices.SortFunc(jobs, func(x, y job) int {
		return cmp.Or(cmp.Compare(x.st.tried, y.st.tried), strings.Compare(x.id, y.id))
	})

	timeout := scrapeTimeout(a.cfg.Interval)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	results := make([]scrapeResult, len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(maxConcurrentScrapes, len(jobs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) || rctx.Err() != nil {
					return
				}
				results[i] = a.scrapeOne(rctx, jobs[i].st.target)
			}
		})
	}
	wg.Wait()

	for i, j := range jobs {
		r := results[i]
		if !r.started {
			out[j.id] = runLatency{err: fmt.Sprintf("not scraped: the host's %d endpoints took the %s the agent gives them per reading", len(jobs), timeout)}
			continue
		}
		j.st.tried = a.round
		out[j.id] = a.latencyOf(j.st, r, now)
	}
	return out
}

// scrapeOne scrapes one endpoint. A panic in reading what the endpoint sent
// (the parser is not ours, the bytes are the tenant's) is that endpoint's
// error, not the agent's end.
func (a *Agent) scrapeOne(ctx context.Context, t MetricsTarget) (r scrapeResult) {
	r.started = true
	defer func() {
		if p := recover(); p != nil {
			a.log.Error("scrape: reading an endpoint's answer panicked", "url", t.URL, "panic", p)
			r.h, r.err = Histogram{}, fmt.Errorf("scrape %s: the agent could not read the answer (%v)", t.URL, p)
		}
	}()
	r.h, r.err = Scrape(ctx, a.scraper, t.URL, t.Histogram, scrapeBodyLimit)
	return r
}

// latencyOf turns a run's scrape into its latency, and keeps the histogram
// for the next window. A failed scrape keeps the previous histogram: the
// next window then spans the failure, if not for too long.
func (a *Agent) latencyOf(st *scrapeState, r scrapeResult, now time.Time) runLatency {
	if r.err != nil {
		msg := strings.TrimPrefix(r.err.Error(), "hostagent: ")
		if errors.Is(r.err, context.DeadlineExceeded) {
			msg = fmt.Sprintf("scrape %s: no answer within %s", st.target.URL, scrapeTimeout(a.cfg.Interval))
		}
		return runLatency{err: limitError(msg)}
	}
	prev, had, age := st.prev, st.have, now.Sub(st.prevTime)
	st.prev, st.prevTime, st.have = r.h, now, true
	switch {
	case !had:
		return runLatency{err: errFirstReading}
	case age > latencyStaleIntervals*a.cfg.Interval:
		return runLatency{err: fmt.Sprintf("the last reading is %s old; P99 from the next one", age.Round(time.Millisecond))}
	}
	p, ok := P99(prev, r.h)
	if !ok {
		return runLatency{err: whyNoP99(prev, r.h)}
	}
	if !(p > 0) || math.IsInf(p, 0) {
		// 0 is "no reading" on the wire; a histogram with buckets at or
		// below zero cannot be a latency.
		return runLatency{err: fmt.Sprintf("the P99 is %v, not a latency: are the histogram's buckets in seconds?", p)}
	}
	return runLatency{p99: p}
}

// whyNoP99 says why P99(prev, cur) has no answer, in the words of a
// latency error.
func whyNoP99(prev, cur Histogram) string {
	n := len(cur.Buckets)
	if n < 2 {
		return "the histogram has no bucket but +Inf"
	}
	if len(prev.Buckets) != n {
		return "the histogram's buckets changed (the instance restarted?); P99 from the next reading"
	}
	for i, b := range cur.Buckets {
		switch {
		case prev.Buckets[i].UpperBound != b.UpperBound:
			return "the histogram's buckets changed (the instance restarted?); P99 from the next reading"
		case b.Count < prev.Buckets[i].Count:
			return "the histogram went back (the instance restarted?); P99 from the next reading"
		}
	}
	if cur.Buckets[n-1].Count == prev.Buckets[n-1].Count {
		return "no requests in the window"
	}
	return "the histogram's buckets are not cumulative"
}

// limitError makes s fit a report: at most latencyErrorMax bytes, valid
// UTF-8 (protobuf refuses to encode a string that is not, and the text may
// quote the endpoint's bytes).
func limitError(s string) string {
	if len(s) > latencyErrorMax {
		s = s[:latencyErrorMax-len("…")] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
