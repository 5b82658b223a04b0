package hostagent

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Bucket is one cumulative bucket of a histogram: Count observations were
// ≤ UpperBound.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// Histogram is a cumulative histogram as read from one scrape: one
// instance's histogram family summed over all its series (label sets).
//
// Counts are float64 because the text format allows fractional counts and
// because a sum over series is what PromQL's sum by (le) gives; integer
// counts up to 2^53 are exact.
type Histogram struct {
	// Buckets are ascending by UpperBound, the last one +Inf (its Count
	// is Count unless the exporter contradicts itself).
	Buckets []Bucket
	// Count is the number of observations, Sum their total.
	Count float64
	Sum   float64
}

// Scrape fetches url with client, reads at most limit bytes of Prometheus
// text exposition, and returns the histogram family named metric (its base
// name, without _bucket) summed over all its series.
//
// Every way an endpoint can be bad is an error, never a panic: the request
// fails or ctx ends (a slow instance: give ctx a deadline shorter than the
// reporting period), the status is not 200, the body is larger than limit
// bytes, the Content-Type says something other than Prometheus text, the
// body does not parse, metric is missing or is not a histogram, or a bucket
// count is not a count. The body is read bounded because an instance's
// endpoint is the tenant's code, and the agent must not be made to hold an
// arbitrary amount of it in memory.
//
// Series whose bucket layouts differ (rare: a layout is usually fixed per
// metric in the code) are merged on the union of their upper bounds; a
// series without some bound contributes its count at its next lower bound,
// the most that is known to be ≤ that bound, so the sum stays cumulative.
func Scrape(ctx context.Context, client *http.Client, url, metric string, limit int64) (Histogram, error) {
	if limit <= 0 {
		return Histogram{}, fmt.Errorf("hostagent: scrape %s: limit must be > 0, got %d", url, limit)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Histogram{}, fmt.Errorf("hostagent: scrape %s: %w", url, err)
	}
	// Ask for the classic text format: it is what every client library
	// serves, and the only one the parser below reads. The escaping
	// parameter keeps UTF-8 names as they are; the parser accepts them.
	req.Header.Set("Accept", "text/plain;version=0.0.4;escaping=allow-utf-8")
	resp, err := client.Do(req)
	if err != nil {
		return Histogram{}, fmt.Errorf("hostagent: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Histogram{}, fmt.Errorf("hostagent: scrape %s: status %s", url, resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		// An empty Content-Type is tolerated (small hand-written exporters
		// omit it) and left to the parser to judge.
		if expfmt.ResponseFormat(resp.Header).FormatType() != expfmt.TypeTextPlain {
			return Histogram{}, fmt.Errorf("hostagent: scrape %s: Content-Type %q is not Prometheus text format", url, ct)
		}
	}
	// limit+1 so that a body of exactly limit bytes is fine and one byte
	// more is detected without reading further.
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return Histogram{}, fmt.Errorf("hostagent: scrape %s: read body: %w", url, err)
	}
	if int64(len(body)) > limit {
		return Histogram{}, fmt.Errorf("hostagent: scrape %s: body larger than the limit of %d bytes", url, limit)
	}
	h, err := parseHistogram(body, metric)
	if err != nil {
		return Histogram{}, fmt.Errorf("hostagent: scrape %s: %w", url, err)
	}
	return h, nil
}

// parseHistogram parses a text exposition and returns family metric summed
// over its series.
func parseHistogram(body []byte, metric string) (Histogram, error) {
	// The parser must be built with a name validation scheme (the zero
	// TextParser is invalid). UTF-8 validation accepts every legacy name
	// and the quoted UTF-8 names newer clients may send.
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return Histogram{}, fmt.Errorf("not Prometheus text format: %w", err)
	}
	fam, ok := fams[metric]
	if !ok {
		return Histogram{}, fmt.Errorf("metric %q not found", metric)
	}
	if fam.GetType() != dto.MetricType_HISTOGRAM {
		return Histogram{}, fmt.Errorf("metric %q is a %s, not a histogram", metric, fam.GetType())
	}
	var h Histogram
	series := make([][]Bucket, 0, len(fam.GetMetric()))
	for _, m := range fam.GetMetric() {
		dh := m.GetHistogram()
		count := float64(dh.GetSampleCount())
		if dh.SampleCountFloat != nil {
			count = dh.GetSampleCountFloat()
		}
		if !validCount(count) {
			return Histogram{}, fmt.Errorf("metric %q: count %v is not a count", metric, count)
		}
		bs := make([]Bucket, 0, len(dh.GetBucket())+1)
		for _, b := range dh.GetBucket() {
			c := float64(b.GetCumulativeCount())
			if b.CumulativeCountFloat != nil {
				c = b.GetCumulativeCountFloat()
			}
			if !validCount(c) {
				return Histogram{}, fmt.Errorf("metric %q: bucket le=%v: count %v is not a count", metric, b.GetUpperBound(), c)
			}
			if math.IsNaN(b.GetUpperBound()) {
				return Histogram{}, fmt.Errorf("metric %q: bucket with le=NaN", metric)
			}
			bs = append(bs, Bucket{UpperBound: b.GetUpperBound(), Count: c})
		}
		slices.SortFunc(bs, func(a, b Bucket) int { return cmp.Compare(a.UpperBound, b.UpperBound) })
		// The text format's +Inf bucket is optional in practice (the
		// parser keeps what was sent); _count is the same number.
		if len(bs) == 0 || !math.IsInf(bs[len(bs)-1].UpperBound, 1) {
			bs = append(bs, Bucket{UpperBound: math.Inf(1), Count: count})
		}
		series = append(series, bs)
		h.Count += count
		h.Sum += dh.GetSampleSum()
	}
	h.Buckets = mergeBuckets(series)
	return h, nil
}

func validCount(c float64) bool { return c >= 0 && !math.IsInf(c, 0) } // NaN fails c >= 0

// mergeBuckets sums cumulative bucket lists (each ascending, ending at +Inf)
// on the union of their upper bounds; see Scrape for series lacking a bound.
//
// Each series is turned into steps (at this bound, this many more
// observations), and one sweep over all steps in bound order adds them up:
// the running total at a bound is then every series' count at its largest
// bound at or below it. One sort, so a tenant's endpoint with many series of
// odd layouts costs n log n, not series × bounds.
func mergeBuckets(series [][]Bucket) []Bucket {
	var steps []Bucket // UpperBound, Count = increment at that bound
	for _, bs := range series {
		below := 0.0
		for _, b := range bs {
			steps = append(steps, Bucket{UpperBound: b.UpperBound, Count: b.Count - below})
			below = b.Count
		}
	}
	slices.SortStableFunc(steps, func(a, b Bucket) int { return cmp.Compare(a.UpperBound, b.UpperBound) })
	var out []Bucket
	running := 0.0
	for _, st := range steps {
		running += st.Count
		if n := len(out); n > 0 && out[n-1].UpperBound == st.UpperBound {
			out[n-1].Count = running
			continue
		}
		out = append(out, Bucket{UpperBound: st.UpperBound, Count: running})
	}
	return out
}

// P99 returns the 0.99 quantile, in the histogram's unit (seconds for a
// latency histogram), of the observations made between two scrapes of the
// same instance: prev earlier, cur later. A zero prev means "since the
// instance started".
//
// The window's histogram is cur − prev, bucket by bucket, and the quantile
// is found as Prometheus' histogram_quantile finds it: the bucket where the
// rank 0.99 × count falls, then linear interpolation between its lower and
// upper bound (the first bucket's lower bound is 0 if its upper bound is
// positive). When the rank falls into the +Inf bucket it returns the
// highest finite upper bound: the histogram cannot say more than "at least
// that".
//
// ok is false, and the number meaningless, when there is no answer to give:
// no observation fell in the window; a counter went down (the instance
// restarted, so cur − prev is not what happened in the window); prev and
// cur have different bucket layouts (a restart with new code); or cur has no
// finite bucket to answer with. A caller keeps cur as the next prev in every
// case, so one restart costs one window, not every window after it.
func P99(prev, cur Histogram) (seconds float64, ok bool) {
	return quantile(0.99, prev, cur)
}

func quantile(q float64, prev, cur Histogram) (float64, bool) {
	n := len(cur.Buckets)
	if n < 2 || !math.IsInf(cur.Buckets[n-1].UpperBound, 1) {
		return 0, false
	}
	if len(prev.Buckets) != 0 && len(prev.Buckets) != n {
		return 0, false
	}
	if cur.Count < prev.Count {
		return 0, false
	}
	// Window buckets, cumulative. Check each bucket, not just the count:
	// after a restart the total may have caught up with prev already while
	// the buckets did not.
	win := make([]float64, n)
	for i, b := range cur.Buckets {
		var p float64
		if len(prev.Buckets) != 0 {
			if prev.Buckets[i].UpperBound != b.UpperBound {
				return 0, false
			}
			p = prev.Buckets[i].Count
		}
		win[i] = b.Count - p
		// A bucket that lost observations, or a window that is no longer
		// cumulative, only comes from a reset.
		if win[i] < 0 || (i > 0 && win[i] < win[i-1]) {
			return 0, false
		}
	}
	total := win[n-1]
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	i := sort.Search(n, func(i int) bool { return win[i] >= rank })
	if i == n-1 {
		return cur.Buckets[n-2].UpperBound, true
	}
	upper := cur.Buckets[i].UpperBound
	lower, below := 0.0, 0.0
	if i == 0 {
		if upper <= 0 {
			// Nothing known about how far below zero the values go.
			return upper, true
		}
	} else {
		lower, below = cur.Buckets[i-1].UpperBound, win[i-1]
	}
	inBucket := win[i] - below
	return lower + (upper-lower)*(rank-below)/inBucket, true
}
