package history

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
)

// conformance runs the cases every Store passes. open returns a new,
// empty store, closed when the test ends.
func conformance(t *testing.T, open func(t *testing.T) Store) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, s Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"PutIsIdempotent", testPutIsIdempotent},
		{"PutReplacesAndReindexes", testPutReplacesAndReindexes},
		{"PutIsAllOrNothing", testPutIsAllOrNothing},
		{"NotFound", testNotFound},
		{"Delete", testDelete},
		{"ClusterIsolation", testClusterIsolation},
		{"Filters", testFilters},
		{"Paging", testPaging},
		{"PagingStableUnderConcurrentPuts", testPagingStableUnderConcurrentPuts},
		{"InvalidArguments", testInvalidArguments},
		{"HundredThousandInstances", testHundredThousandInstances},
		{"FederatedRoundTrip", testFederatedRoundTrip},
		{"FederatedPutIsIdempotent", testFederatedPutIsIdempotent},
		{"FederatedIsolation", testFederatedIsolation},
		{"FederatedDelete", testFederatedDelete},
		{"FederatedFiltersAndPaging", testFederatedFiltersAndPaging},
		{"FederatedInvalidArguments", testFederatedInvalidArguments},
		{"FederatedClosed", testFederatedClosed},
		{"Closed", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := open(t)
			if c.run == nil {
				testClosed(t, s)
				return
			}
			c.run(t, s)
		})
	}
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func put(t *testing.T, s Store, jobs ...*Job) {
	t.Helper()
	if err := s.Put(bg(t), jobs...); err != nil {
		t.Fatalf("put: %v", err)
	}
}

func get(t *testing.T, s Store, cluster, id string) *Job {
	t.Helper()
	j, err := s.Get(bg(t), cluster, id)
	if err != nil {
		t.Fatalf("get %s/%s: %v", cluster, id, err)
	}
	return j
}

// listAll pages through f with pages of size, checking every page, and
// returns the ids in order.
func listAll(t *testing.T, s Store, f Filter, size uint32) []string {
	t.Helper()
	var ids []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("list does not end")
		}
		page, next, err := s.List(bg(t), f, size, token)
		if err != nil {
			t.Fatalf("list %+v: %v", f, err)
		}
		if size > 0 && len(page) > int(size) {
			t.Fatalf("page of %d jobs, asked for %d", len(page), size)
		}
		if next != "" && len(page) == 0 {
			t.Fatal("an empty page with a next page")
		}
		for _, j := range page {
			ids = append(ids, j.Id)
		}
		if next == "" {
			return ids
		}
		token = next
	}
}

func testRoundTrip(t *testing.T, s Store) {
	j := makeJob("a", "j1").instances(50).specVersions(3).seeded(3).labels("team", "ml", "tier", "batch").obj()
	j.Tasks[7] = nil // an instance that never had a task
	put(t, s, j)
	equalJobs(t, "get", get(t, s, "a", "j1"), j)

	page, next, err := s.List(bg(t), Filter{Cluster: "a"}, 0, "")
	if err != nil || next != "" || len(page) != 1 {
		t.Fatalf("list: %d jobs, next %q, %v", len(page), next, err)
	}
	if !proto.Equal(page[0], j.Summary()) {
		t.Fatalf("listed\n%v\nwant the summary\n%v", page[0], j.Summary())
	}
	if page[0].Spec.DefaultSpec != nil || page[0].Spec.Description != "" {
		t.Fatal("a list shows a summary of the spec, without task specs or description")
	}
}

func testPutIsIdempotent(t *testing.T, s Store) {
	j := makeJob("a", "j1").instances(20).obj()
	put(t, s, j)
	put(t, s, j)
	put(t, s, makeJob("a", "j1").instances(20).obj()) // the same job, archived again by a restarted collector
	if ids := listAll(t, s, Filter{Cluster: "a"}, 0); len(ids) != 1 {
		t.Fatalf("listed %v after putting one job three times", ids)
	}
	equalJobs(t, "get", get(t, s, "a", "j1"), j)
}

// testPutReplacesAndReindexes archives a job again with other indexed
// values (a job restarted after it was first archived): one record, found
// by its new values only.
func testPutReplacesAndReindexes(t *testing.T, s Store) {
	t0 := time.Date(2031, 5, 1, 0, 0, 0, 0, time.UTC)
	put(t, s, makeJob("a", "j1").pool("/old").created(t0).state(pelotonv1.JobState_JOB_FAILED).obj())
	again := makeJob("a", "j1").pool("/new").created(t0.Add(time.Hour)).state(pelotonv1.JobState_JOB_SUCCEEDED).instances(3).obj()
	put(t, s, again)
	equalJobs(t, "get", get(t, s, "a", "j1"), again)
	for _, c := range []struct {
		f    Filter
		want int
	}{
		{Filter{Cluster: "a"}, 1},
		{Filter{Cluster: "a", Pool: "/old"}, 0},
		{Filter{Cluster: "a", Pool: "/new"}, 1},
		{Filter{Cluster: "a", States: []pelotonv1.JobState{pelotonv1.JobState_JOB_FAILED}}, 0},
		{Filter{Cluster: "a", States: []pelotonv1.JobState{pelotonv1.JobState_JOB_SUCCEEDED}}, 1},
		{Filter{Cluster: "a", CreatedUntil: t0.Add(time.Minute)}, 0},
	} {
		if ids := listAll(t, s, c.f, 0); len(ids) != c.want {
			t.Errorf("list %+v: %v, want %d jobs", c.f, ids, c.want)
		}
	}
}

func testPutIsAllOrNothing(t *testing.T, s Store) {
	good := makeJob("a", "good").obj()
	bad := makeJob("a", "bad").obj()
	bad.Status.CreateTime = nil
	err := s.Put(bg(t), good, bad)
	var fe *FieldError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field != "jobs[1].status.createTime" {
		t.Fatalf("put with an invalid job: %v, want ErrInvalid naming jobs[1].status.createTime", err)
	}
	if _, err := s.Get(bg(t), "a", "good"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the valid job of a refused put: %v, want not found", err)
	}
	// Many jobs in one put.
	var jobs []*Job
	for i := range 300 {
		jobs = append(jobs, makeJob("a", fmt.Sprintf("j%03d", i)).obj())
	}
	put(t, s, jobs...)
	if ids := listAll(t, s, Filter{Cluster: "a"}, MaxPageSize); len(ids) != 300 {
		t.Fatalf("listed %d jobs of a put of 300", len(ids))
	}
}

func testNotFound(t *testing.T, s Store) {
	put(t, s, makeJob("a", "j1").obj())
	for _, k := range [][2]string{{"a", "nope"}, {"b", "j1"}, {"nope", "nope"}} {
		_, err := s.Get(bg(t), k[0], k[1])
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("get %s/%s: %v, want ErrNotFound", k[0], k[1], err)
		}
		if err != nil && !strings.Contains(err.Error(), k[1]) {
			t.Errorf("get %s/%s: %q does not name the job", k[0], k[1], err)
		}
		if err := s.Delete(bg(t), k[0], k[1]); !errors.Is(err, ErrNotFound) {
			t.Errorf("delete %s/%s: %v, want ErrNotFound", k[0], k[1], err)
		}
	}
	if page, next, err := s.List(bg(t), Filter{Cluster: "nope"}, 0, ""); err != nil || len(page) != 0 || next != "" {
		t.Errorf("list of a cluster with no jobs: %v %q %v", page, next, err)
	}
}

func testDelete(t *testing.T, s Store) {
	t0 := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		put(t, s, makeJob("a", fmt.Sprint("j", i)).created(t0.Add(time.Duration(i)*time.Second)).pool("/p").obj())
	}
	if err := s.Delete(bg(t), "a", "j1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(bg(t), "a", "j1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := s.Delete(bg(t), "a", "j1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	for _, f := range []Filter{{Cluster: "a"}, {Cluster: "a", Pool: "/p"}, {Cluster: "a", States: []pelotonv1.JobState{pelotonv1.JobState_JOB_SUCCEEDED}}} {
		if ids := listAll(t, s, f, 0); strings.Join(ids, ",") != "j2,j0" {
			t.Errorf("list %+v after delete: %v, want j2,j0", f, ids)
		}
	}
	// Archived again after a purge: there again.
	put(t, s, makeJob("a", "j1").obj())
	get(t, s, "a", "j1")
}

func testClusterIsolation(t *testing.T, s Store) {
	a := makeJob("a", "same").name("in-a").instances(2).obj()
	b := makeJob("b", "same").name("in-b").instances(5).obj()
	fed := makeJob("federation", "other").obj()
	put(t, s, a, b, fed)
	equalJobs(t, "a", get(t, s, "a", "same"), a)
	equalJobs(t, "b", get(t, s, "b", "same"), b)
	for c, want := range map[string]string{"a": "in-a", "b": "in-b"} {
		page, _, err := s.List(bg(t), Filter{Cluster: c}, 0, "")
		if err != nil || len(page) != 1 || page[0].Spec.Name != want {
			t.Fatalf("list of %s: %v %v", c, page, err)
		}
	}
	if err := s.Delete(bg(t), "a", "same"); err != nil {
		t.Fatal(err)
	}
	equalJobs(t, "b after a's delete", get(t, s, "b", "same"), b)
	if ids := listAll(t, s, Filter{Cluster: "federation"}, 0); strings.Join(ids, ",") != "other" {
		t.Fatalf("federation lists %v", ids)
	}
}

// filterJobs is a varied set of jobs: names, pools, states, labels and
// creation times (some equal, so that ids break ties).
func filterJobs() []*Job {
	rng := rand.New(rand.NewPCG(5, 5))
	t0 := time.Date(2032, 3, 4, 5, 6, 7, 0, time.UTC)
	states := []pelotonv1.JobState{pelotonv1.JobState_JOB_SUCCEEDED, pelotonv1.JobState_JOB_FAILED, pelotonv1.JobState_JOB_KILLED}
	var jobs []*Job
	for i := range 60 {
		b := makeJob("a", fmt.Sprintf("id-%02d", rng.IntN(1000))+fmt.Sprint(i)).
			name([]string{"etl-daily", "etl-hourly", "train-resnet", "Train-bert", "ünïcode"}[rng.IntN(5)]).
			pool([]string{"/default", "/ml/gpu", "/etl"}[rng.IntN(3)]).
			state(states[rng.IntN(3)]).
			created(t0.Add(time.Duration(rng.IntN(20)) * time.Minute))
		switch rng.IntN(3) {
		case 0:
			b.labels("team", "ml", "env", "prod")
		case 1:
			b.labels("team", "etl")
		}
		jobs = append(jobs, b.obj())
	}
	// A job with a label whose value is empty, and one before 1970.
	jobs = append(jobs, makeJob("a", "empty-label").labels("team", "").created(t0).obj(),
		makeJob("a", "old").created(time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC)).obj())
	return jobs
}

// want is what List must return for f, computed plainly.
func want(jobs []*Job, f Filter) []string {
	var sel []*Job
	for _, j := range jobs {
		spec, ct := j.Spec(), j.Status.CreateTime.AsTime()
		if f.Name != "" && !strings.Contains(spec.Name, f.Name) ||
			f.Pool != "" && spec.Pool != f.Pool ||
			!f.CreatedSince.IsZero() && ct.Before(f.CreatedSince) ||
			!f.CreatedUntil.IsZero() && !ct.Before(f.CreatedUntil) {
			continue
		}
		if len(f.States) > 0 {
			found := false
			for _, s := range f.States {
				found = found || s == j.Status.State
			}
			if !found {
				continue
			}
		}
		ok := true
		for k, v := range f.Labels {
			got, has := spec.Labels[k]
			ok = ok && has && got == v
		}
		if ok {
			sel = append(sel, j)
		}
	}
	sort.Slice(sel, func(a, b int) bool {
		ta, tb := sel[a].Status.CreateTime.AsTime(), sel[b].Status.CreateTime.AsTime()
		if !ta.Equal(tb) {
			return ta.After(tb)
		}
		return sel[a].ID < sel[b].ID
	})
	ids := []string{}
	for _, j := range sel {
		ids = append(ids, j.ID)
	}
	return ids
}

func testFilters(t *testing.T, s Store) {
	jobs := filterJobs()
	put(t, s, jobs...)
	put(t, s, makeJob("b", "other-cluster").obj())
	t0 := time.Date(2032, 3, 4, 5, 6, 7, 0, time.UTC)
	succeeded, failed, killed := pelotonv1.JobState_JOB_SUCCEEDED, pelotonv1.JobState_JOB_FAILED, pelotonv1.JobState_JOB_KILLED
	for _, f := range []Filter{
		{},
		{Name: "etl"},
		{Name: "Train"},
		{Name: "ünï"},
		{Name: "nothing-like-it"},
		{Pool: "/ml/gpu"},
		{Pool: "/ml"}, // a pool is matched whole
		{States: []pelotonv1.JobState{failed}},
		{States: []pelotonv1.JobState{failed, killed}},
		{States: []pelotonv1.JobState{succeeded, failed, killed, failed}},
		{States: []pelotonv1.JobState{pelotonv1.JobState_JOB_RUNNING}},
		{Labels: map[string]string{"team": "ml"}},
		{Labels: map[string]string{"team": "ml", "env": "prod"}},
		{Labels: map[string]string{"team": "ml", "env": "dev"}},
		{Labels: map[string]string{"team": ""}},
		{Labels: map[string]string{"env": ""}},
		{CreatedSince: t0.Add(10 * time.Minute)},
		{CreatedUntil: t0.Add(10 * time.Minute)},
		{CreatedSince: t0.Add(5 * time.Minute), CreatedUntil: t0.Add(6 * time.Minute)},
		{CreatedSince: t0.Add(5 * time.Minute), CreatedUntil: t0.Add(5 * time.Minute)},
		{CreatedUntil: t0},
		{CreatedUntil: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)},
		{CreatedSince: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Pool: "/etl", States: []pelotonv1.JobState{succeeded}, Name: "etl", CreatedSince: t0.Add(3 * time.Minute)},
		{Pool: "/ml/gpu", Labels: map[string]string{"team": "ml"}, States: []pelotonv1.JobState{failed, killed}},
	} {
		f.Cluster = "a"
		exp := want(jobs, f)
		for _, size := range []uint32{0, 1, 7} {
			if got := listAll(t, s, f, size); strings.Join(got, ",") != strings.Join(exp, ",") {
				t.Errorf("list %+v in pages of %d:\n got %v\nwant %v", f, size, got, exp)
			}
		}
	}
}

func testPaging(t *testing.T, s Store) {
	t0 := time.Date(2033, 1, 1, 0, 0, 0, 0, time.UTC)
	var jobs []*Job
	for i := range 25 {
		// Five jobs per creation time: ids order them within it.
		jobs = append(jobs, makeJob("a", fmt.Sprintf("j%02d", 24-i)).created(t0.Add(time.Duration(i/5)*time.Second)).obj())
	}
	// Ids that begin one another, at one time: byte order, shorter first.
	for _, id := range []string{"p", "pq", "p-", "pqr"} {
		jobs = append(jobs, makeJob("a", id).created(t0.Add(-time.Second)).obj())
	}
	put(t, s, jobs...)
	exp := want(jobs, Filter{})
	if got := strings.Join(listAll(t, s, Filter{Cluster: "a"}, 3), ","); !strings.HasSuffix(got, ",p,p-,pq,pqr") {
		t.Fatalf("listed %s; want p, p-, pq, pqr last", got)
	}
	page, next, err := s.List(bg(t), Filter{Cluster: "a"}, 10, "")
	if err != nil || len(page) != 10 || next == "" {
		t.Fatalf("first page: %d jobs, next %q, %v", len(page), next, err)
	}
	if page[0].Id != exp[0] || page[9].Id != exp[9] {
		t.Fatalf("first page %s..%s, want %s..%s", page[0].Id, page[9].Id, exp[0], exp[9])
	}
	// A token is not bound to the store instance or a filter: it is a
	// position.
	page2, _, err := s.List(bg(t), Filter{Cluster: "a", Name: "job-"}, 10, next)
	if err != nil || len(page2) != 10 || page2[0].Id != exp[10] {
		t.Fatalf("second page: %v %v", page2, err)
	}
	// The last page ends the list: exactly a page left gives no token.
	if _, last, err := s.List(bg(t), Filter{Cluster: "a"}, 29, ""); err != nil || last != "" {
		t.Fatalf("a page of everything: next %q, %v", last, err)
	}
	for _, bad := range []string{"x", "aDE", cursor{createNanos: 1, id: "x"}.token()[2:], "!!!"} {
		_, _, err := s.List(bg(t), Filter{Cluster: "a"}, 10, bad)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "pageToken" {
			t.Errorf("token %q: %v, want an error naming pageToken", bad, err)
		}
	}
	_, _, err = s.List(bg(t), Filter{Cluster: "a"}, MaxPageSize+1, "")
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "pageSize" {
		t.Errorf("page size %d: %v, want an error naming pageSize", MaxPageSize+1, err)
	}
	if page, _, err := s.List(bg(t), Filter{Cluster: "a"}, 0, ""); err != nil || len(page) != 29 {
		t.Errorf("default page size: %d jobs, %v", len(page), err)
	}
}

// testPagingStableUnderConcurrentPuts pages through a list while other
// jobs are archived (before, after and among those listed): every job
// there from the start is listed exactly once, none twice.
func testPagingStableUnderConcurrentPuts(t *testing.T, s Store) {
	t0 := time.Date(2034, 1, 1, 0, 0, 0, 0, time.UTC)
	var first []*Job
	for i := range 200 {
		first = append(first, makeJob("a", fmt.Sprintf("first-%03d", i)).created(t0.Add(time.Duration(i)*time.Second)).obj())
	}
	put(t, s, first...)

	ctx, cancel := context.WithCancel(bg(t))
	var wg sync.WaitGroup
	wg.Add(1)
	var putErr error
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; ctx.Err() == nil && i < 400; i++ {
			// Anywhere from before the first job to after the last.
			at := t0.Add(time.Duration(rng.IntN(240)-20) * time.Second)
			if err := s.Put(ctx, makeJob("a", fmt.Sprintf("later-%03d", i)).created(at).obj()); err != nil && ctx.Err() == nil {
				putErr = err
				return
			}
		}
	}()
	seen := map[string]int{}
	token := ""
	for {
		page, next, err := s.List(bg(t), Filter{Cluster: "a"}, 7, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page {
			seen[j.Id]++
		}
		if next == "" {
			break
		}
		token = next
	}
	cancel()
	wg.Wait()
	if putErr != nil {
		t.Fatalf("concurrent put: %v", putErr)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s listed %d times", id, n)
		}
	}
	for _, j := range first {
		if seen[j.ID] != 1 {
			t.Errorf("%s, there all along, listed %d times", j.ID, seen[j.ID])
		}
	}
}

func testInvalidArguments(t *testing.T, s Store) {
	field := func(err error) string {
		var fe *FieldError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) {
			return fmt.Sprintf("not a FieldError: %v", err)
		}
		return fe.Field
	}
	mod := func(f func(j *Job)) *Job {
		j := makeJob("a", "j").obj()
		f(j)
		return j
	}
	for want, j := range map[string]*Job{
		"jobs[0].cluster":            mod(func(j *Job) { j.Cluster = "" }),
		"jobs[0].id":                 mod(func(j *Job) { j.ID = "" }),
		"jobs[0].status":             mod(func(j *Job) { j.Status = nil }),
		"jobs[0].versions":           mod(func(j *Job) { j.Versions = nil }),
		"jobs[0].versions[0].spec":   mod(func(j *Job) { j.Versions[0].Spec = nil }),
		"jobs[0].status.specVersion": mod(func(j *Job) { j.Status.SpecVersion = 9 }),
		"jobs[0].spec.name":          mod(func(j *Job) { j.Spec().Name = "nul\x00" }),
		"jobs[0].spec.labels[k]":     mod(func(j *Job) { j.Spec().Labels = map[string]string{"k": "\xff"} }),
		"jobs[0].status.createTime":  mod(func(j *Job) { j.Status.CreateTime.Seconds = 1 << 40 }),
	} {
		if got := field(s.Put(bg(t), j)); got != want {
			t.Errorf("put: field %s, want %s", got, want)
		}
	}
	if got := field(s.Put(bg(t), makeJob("a", "x").obj(), makeJob("a", "x").obj())); got != "jobs[1]" {
		t.Errorf("put of a job twice: field %s, want jobs[1]", got)
	}
	if got := field(s.Put(bg(t), nil)); got != "jobs[0]" {
		t.Errorf("put of nil: field %s", got)
	}
	_, err := s.Get(bg(t), "", "j")
	if got := field(err); got != "cluster" {
		t.Errorf("get without cluster: field %s", got)
	}
	_, err = s.Get(bg(t), "a", "")
	if got := field(err); got != "jobId" {
		t.Errorf("get without id: field %s", got)
	}
	if got := field(s.Delete(bg(t), "a", strings.Repeat("x", maxIDLen+1))); got != "jobId" {
		t.Errorf("delete of a long id: field %s", got)
	}
	for want, f := range map[string]Filter{
		"cluster":      {},
		"createdSince": {Cluster: "a", CreatedSince: time.Unix(2, 0), CreatedUntil: time.Unix(1, 0)},
		"labels":       {Cluster: "a", Labels: map[string]string{"": "x"}},
		"name":         {Cluster: "a", Name: "\x00"},
	} {
		_, _, err := s.List(bg(t), f, 0, "")
		if got := field(err); got != want {
			t.Errorf("list %+v: field %s, want %s", f, got, want)
		}
	}
}

func testHundredThousandInstances(t *testing.T, s Store) {
	if testing.Short() {
		t.Skip("short")
	}
	j := bigJob()
	put(t, s, j)
	// The codec's own test compares every instance in full; here, the
	// store returns what it was given.
	equalJobsSampled(t, "100k", get(t, s, "a", "big"), j, 97)
	if ids := listAll(t, s, Filter{Cluster: "a"}, 0); len(ids) != 1 {
		t.Fatalf("listed %v", ids)
	}
}

func testClosed(t *testing.T, s Store) {
	put(t, s, makeJob("a", "j").obj())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(bg(t), "a", "j"); !errors.Is(err, ErrClosed) {
		t.Errorf("get after close: %v, want ErrClosed", err)
	}
	if err := s.Put(bg(t), makeJob("a", "k").obj()); !errors.Is(err, ErrClosed) {
		t.Errorf("put after close: %v, want ErrClosed", err)
	}
	if _, _, err := s.List(bg(t), Filter{Cluster: "a"}, 0, ""); !errors.Is(err, ErrClosed) {
		t.Errorf("list after close: %v, want ErrClosed", err)
	}
}
