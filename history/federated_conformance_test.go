package history

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var fedT0 = time.Date(2031, 6, 1, 12, 0, 0, 0, time.UTC)

// fedJob is an archived federated job of federation fed, created at the
// n-th minute after fedT0.
func fedJob(fed, id string, n int, labels ...string) *Federated {
	created := fedT0.Add(time.Duration(n) * time.Minute)
	ls := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		ls[labels[i]] = labels[i+1]
	}
	job := &pelotonv1.FederatedJob{Id: id, DispatchState: pelotonv1.DispatchState_DISPATCH_DONE, Cluster: "c1",
		ClusterJobId: "cj-" + id, CreateTime: timestamppb.New(created), Message: "ended JOB_SUCCEEDED in cluster c1",
		Spec: &pelotonv1.FederatedJobSpec{Job: &pelotonv1.JobSpec{Name: "n-" + id, Type: pelotonv1.JobType_BATCH, Pool: "/p",
			InstanceCount: 3, Labels: ls}},
		Status: &pelotonv1.JobStatus{State: pelotonv1.JobState_JOB_SUCCEEDED, CompletionTime: timestamppb.New(created.Add(time.Minute))},
		Attempts: []*pelotonv1.FederatedJobAttempt{{Cluster: "c1", ClusterJobId: "cj-" + id, DispatchTime: timestamppb.New(created),
			EndReason: "ended JOB_SUCCEEDED in cluster c1"}}}
	if len(ls) == 0 {
		ls = nil
	}
	return &Federated{Federation: fed, Kind: KindFederatedJob, ID: id, Job: job, CreateTime: created,
		FinishTime: created.Add(time.Minute), Labels: ls, ArchiveTime: created.Add(25 * time.Hour)}
}

// fedService is an archived (deleted) federated service with two rollouts.
func fedService(fed, id string, n int) *Federated {
	created := fedT0.Add(time.Duration(n) * time.Minute)
	svc := &pelotonv1.FederatedService{Id: id, CreateTime: timestamppb.New(created), Deleting: true, SpecVersion: 3,
		Spec:    &pelotonv1.FederatedServiceSpec{Job: &pelotonv1.JobSpec{Name: "web", Type: pelotonv1.JobType_SERVICE, InstanceCount: 6}},
		Rollout: &pelotonv1.ServiceRollout{Id: 2, State: pelotonv1.RolloutState_ROLLOUT_ABORTED, Message: "aborted: the service is being deleted"},
		History: []*pelotonv1.ServiceRollout{{Id: 1, State: pelotonv1.RolloutState_ROLLOUT_SUCCEEDED}}}
	return &Federated{Federation: fed, Kind: KindFederatedService, ID: id, Service: svc, CreateTime: created,
		FinishTime: created.Add(time.Hour), ArchiveTime: created.Add(time.Hour)}
}

func equalFederated(t *testing.T, what string, got, want *Federated) {
	t.Helper()
	switch {
	case got.Federation != want.Federation || got.Kind != want.Kind || got.ID != want.ID:
		t.Fatalf("%s: got %s %s %s, want %s %s %s", what, got.Federation, got.Kind, got.ID, want.Federation, want.Kind, want.ID)
	case !got.CreateTime.Equal(want.CreateTime) || !got.FinishTime.Equal(want.FinishTime) || !got.ArchiveTime.Equal(want.ArchiveTime):
		t.Fatalf("%s: times %v %v %v, want %v %v %v", what, got.CreateTime, got.FinishTime, got.ArchiveTime, want.CreateTime, want.FinishTime, want.ArchiveTime)
	case !proto.Equal(got.Job, want.Job) || !proto.Equal(got.Service, want.Service):
		t.Fatalf("%s: object\n%v%v\nwant\n%v%v", what, got.Job, got.Service, want.Job, want.Service)
	case fmt.Sprint(got.Labels) != fmt.Sprint(want.Labels):
		t.Fatalf("%s: labels %v, want %v", what, got.Labels, want.Labels)
	}
}

func putFed(t *testing.T, s Store, objs ...*Federated) {
	t.Helper()
	if err := s.PutFederated(bg(t), objs...); err != nil {
		t.Fatalf("put federated: %v", err)
	}
}

func getFed(t *testing.T, s Store, fed string, k Kind, id string) *Federated {
	t.Helper()
	o, err := s.GetFederated(bg(t), fed, k, id)
	if err != nil {
		t.Fatalf("get %s %s of %s: %v", k, id, fed, err)
	}
	return o
}

// listAllFed pages through f with pages of size and returns the ids in
// order.
func listAllFed(t *testing.T, s Store, f FederatedFilter, size uint32) []string {
	t.Helper()
	var ids []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("list does not end")
		}
		page, next, err := s.ListFederated(bg(t), f, size, token)
		if err != nil {
			t.Fatalf("list %+v: %v", f, err)
		}
		if size > 0 && len(page) > int(size) {
			t.Fatalf("a page of %d, asked for %d", len(page), size)
		}
		if next != "" && len(page) == 0 {
			t.Fatal("an empty page with a next token")
		}
		for _, o := range page {
			ids = append(ids, o.ID)
		}
		if next == "" {
			return ids
		}
		token = next
	}
}

func testFederatedRoundTrip(t *testing.T, s Store) {
	j, svc := fedJob("fed", "j1", 0, "team", "ml"), fedService("fed", "s1", 1)
	putFed(t, s, j, svc)
	equalFederated(t, "get job", getFed(t, s, "fed", KindFederatedJob, "j1"), j)
	equalFederated(t, "get service", getFed(t, s, "fed", KindFederatedService, "s1"), svc)
	page, next, err := s.ListFederated(bg(t), FederatedFilter{Federation: "fed", Kind: KindFederatedService}, 0, "")
	if err != nil || next != "" || len(page) != 1 {
		t.Fatalf("list services: %d, next %q, %v", len(page), next, err)
	}
	equalFederated(t, "listed service", page[0], svc)
	if len(page[0].Service.History) != 1 || page[0].Service.Rollout.GetId() != 2 {
		t.Fatal("the service's rollouts are not kept with it")
	}
}

func testFederatedPutIsIdempotent(t *testing.T, s Store) {
	j := fedJob("fed", "j1", 5)
	putFed(t, s, j)
	putFed(t, s, j)
	// Archived again after a crash between archive and delete, later and
	// by another clock: one record, the last one.
	again := fedJob("fed", "j1", 5)
	again.ArchiveTime = again.ArchiveTime.Add(time.Hour)
	putFed(t, s, again)
	if ids := listAllFed(t, s, FederatedFilter{Federation: "fed", Kind: KindFederatedJob}, 0); len(ids) != 1 {
		t.Fatalf("listed %v after putting one job three times", ids)
	}
	equalFederated(t, "get", getFed(t, s, "fed", KindFederatedJob, "j1"), again)
	// Put again with another creation time: moved, not doubled.
	moved := fedJob("fed", "j1", 50)
	putFed(t, s, moved, fedJob("fed", "j2", 10))
	if ids := listAllFed(t, s, FederatedFilter{Federation: "fed", Kind: KindFederatedJob}, 1); strings.Join(ids, ",") != "j1,j2" {
		t.Fatalf("listed %v, want j1 (now newest) then j2", ids)
	}
	if ids := listAllFed(t, s, FederatedFilter{Federation: "fed", Kind: KindFederatedJob, CreatedUntil: fedT0.Add(20 * time.Minute)}, 0); strings.Join(ids, ",") != "j2" {
		t.Fatalf("listed %v before minute 20, want only j2 (j1's old position is gone)", ids)
	}
}

func testFederatedIsolation(t *testing.T, s Store) {
	// The same id as a federated job of two federations, a federated
	// service, and a cluster job of a cluster named like the federation.
	putFed(t, s, fedJob("f1", "x", 0), fedJob("f2", "x", 1), fedService("f1", "x", 2))
	put(t, s, makeJob("f1", "x").obj())
	if got := getFed(t, s, "f1", KindFederatedJob, "x"); got.Job == nil || got.Federation != "f1" {
		t.Fatalf("f1's job: %+v", got)
	}
	if got := getFed(t, s, "f1", KindFederatedService, "x"); got.Service == nil {
		t.Fatalf("f1's service: %+v", got)
	}
	if _, err := s.GetFederated(bg(t), "f3", KindFederatedJob, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get of an unknown federation: %v, want ErrNotFound", err)
	}
	if _, err := s.GetFederated(bg(t), "f2", KindFederatedService, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get of a kind f2 has none of: %v, want ErrNotFound", err)
	}
	if ids := listAllFed(t, s, FederatedFilter{Federation: "f1", Kind: KindFederatedJob}, 0); len(ids) != 1 {
		t.Fatalf("f1's jobs: %v", ids)
	}
	if err := s.DeleteFederated(bg(t), "f1", KindFederatedJob, "x"); err != nil {
		t.Fatal(err)
	}
	getFed(t, s, "f2", KindFederatedJob, "x")
	getFed(t, s, "f1", KindFederatedService, "x")
	get(t, s, "f1", "x")
	if ids := listAll(t, s, Filter{Cluster: "f1"}, 0); len(ids) != 1 {
		t.Fatalf("cluster f1's jobs: %v", ids)
	}
}

func testFederatedDelete(t *testing.T, s Store) {
	putFed(t, s, fedJob("fed", "j1", 0), fedJob("fed", "j2", 1))
	if err := s.DeleteFederated(bg(t), "fed", KindFederatedJob, "j1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteFederated(bg(t), "fed", KindFederatedJob, "j1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if _, err := s.GetFederated(bg(t), "fed", KindFederatedJob, "j1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if ids := listAllFed(t, s, FederatedFilter{Federation: "fed", Kind: KindFederatedJob}, 0); strings.Join(ids, ",") != "j2" {
		t.Fatalf("listed %v after delete", ids)
	}
}

func testFederatedFiltersAndPaging(t *testing.T, s Store) {
	var all []*Federated
	for i := 0; i < 23; i++ {
		team := []string{"ml", "web"}[i%2]
		all = append(all, fedJob("fed", fmt.Sprintf("j%02d", i), i/2, "team", team)) // pairs share a creation time
	}
	putFed(t, s, all...)
	want := func(keep func(i int) bool) string {
		var ids []string
		for i := len(all) - 1; i >= 0; i-- {
			if keep(i) {
				ids = append(ids, all[i].ID)
			}
		}
		// Newest first, then by id within a creation time.
		for k := 0; k+1 < len(ids); k++ {
			a, b := ids[k], ids[k+1]
			var ia, ib int
			fmt.Sscanf(a, "j%d", &ia)
			fmt.Sscanf(b, "j%d", &ib)
			if ia/2 == ib/2 && a > b {
				ids[k], ids[k+1] = b, a
			}
		}
		return strings.Join(ids, ",")
	}
	base := FederatedFilter{Federation: "fed", Kind: KindFederatedJob}
	for _, size := range []uint32{0, 1, 2, 5, 50} {
		if got, w := strings.Join(listAllFed(t, s, base, size), ","), want(func(int) bool { return true }); got != w {
			t.Fatalf("pages of %d:\n%s\nwant\n%s", size, got, w)
		}
	}
	ml := base
	ml.Labels = map[string]string{"team": "ml"}
	if got, w := strings.Join(listAllFed(t, s, ml, 3), ","), want(func(i int) bool { return i%2 == 0 }); got != w {
		t.Fatalf("team=ml:\n%s\nwant\n%s", got, w)
	}
	window := base
	window.CreatedSince, window.CreatedUntil = fedT0.Add(3*time.Minute), fedT0.Add(7*time.Minute)
	if got, w := strings.Join(listAllFed(t, s, window, 3), ","), want(func(i int) bool { return i/2 >= 3 && i/2 < 7 }); got != w {
		t.Fatalf("minutes [3,7):\n%s\nwant\n%s", got, w)
	}
	if ids := listAllFed(t, s, FederatedFilter{Federation: "fed", Kind: KindFederatedService}, 0); len(ids) != 0 {
		t.Fatalf("services listed: %v", ids)
	}
}

func testFederatedInvalidArguments(t *testing.T, s Store) {
	field := func(err error) string {
		var fe *FieldError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) {
			return fmt.Sprintf("not a FieldError: %v", err)
		}
		return fe.Field
	}
	mod := func(f func(o *Federated)) *Federated {
		o := fedJob("fed", "j", 0)
		f(o)
		return o
	}
	for want, o := range map[string]*Federated{
		"objects[0].federation": mod(func(o *Federated) { o.Federation = "" }),
		"objects[0].id":         mod(func(o *Federated) { o.ID = "" }),
		"objects[0].kind":       mod(func(o *Federated) { o.Kind = 7 }),
		"objects[0].job":        mod(func(o *Federated) { o.Job = nil }),
		"objects[0].job.id":     mod(func(o *Federated) { o.Job.Id = "other" }),
		"objects[0].service":    mod(func(o *Federated) { o.Service = &pelotonv1.FederatedService{Id: "j"} }),
		"objects[0].createTime": mod(func(o *Federated) { o.CreateTime = time.Time{} }),
		"objects[0].finishTime": mod(func(o *Federated) { o.FinishTime = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) }),
		"objects[0].labels[k]":  mod(func(o *Federated) { o.Labels = map[string]string{"k": "\xff"} }),
	} {
		if got := field(s.PutFederated(bg(t), o)); got != want {
			t.Errorf("put: field %s, want %s", got, want)
		}
	}
	if got := field(s.PutFederated(bg(t), fedJob("fed", "x", 0), fedJob("fed", "x", 1))); got != "objects[1]" {
		t.Errorf("put of an object twice: field %s, want objects[1]", got)
	}
	if ids := listAllFed(t, s, FederatedFilter{Federation: "fed", Kind: KindFederatedJob}, 0); len(ids) != 0 {
		t.Fatalf("a refused put stored %v", ids)
	}
	_, err := s.GetFederated(bg(t), "", KindFederatedJob, "j")
	if got := field(err); got != "federation" {
		t.Errorf("get without federation: field %s", got)
	}
	_, err = s.GetFederated(bg(t), "fed", 0, "j")
	if got := field(err); got != "kind" {
		t.Errorf("get without kind: field %s", got)
	}
	if got := field(s.DeleteFederated(bg(t), "fed", KindFederatedService, "")); got != "id" {
		t.Errorf("delete without id: field %s", got)
	}
	for want, f := range map[string]FederatedFilter{
		"federation":   {Kind: KindFederatedJob},
		"kind":         {Federation: "fed"},
		"createdSince": {Federation: "fed", Kind: KindFederatedJob, CreatedSince: time.Unix(2, 0), CreatedUntil: time.Unix(1, 0)},
		"labels":       {Federation: "fed", Kind: KindFederatedJob, Labels: map[string]string{"": "x"}},
	} {
		_, _, err := s.ListFederated(bg(t), f, 0, "")
		if got := field(err); got != want {
			t.Errorf("list %+v: field %s, want %s", f, got, want)
		}
	}
	_, _, err = s.ListFederated(bg(t), FederatedFilter{Federation: "fed", Kind: KindFederatedJob}, 0, "garbage")
	if got := field(err); got != "pageToken" {
		t.Errorf("list with a bad token: field %s", got)
	}
}

func testFederatedClosed(t *testing.T, s Store) {
	putFed(t, s, fedJob("fed", "j", 0))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetFederated(bg(t), "fed", KindFederatedJob, "j"); !errors.Is(err, ErrClosed) {
		t.Errorf("get after close: %v, want ErrClosed", err)
	}
	if err := s.PutFederated(bg(t), fedJob("fed", "k", 0)); !errors.Is(err, ErrClosed) {
		t.Errorf("put after close: %v, want ErrClosed", err)
	}
	if _, _, err := s.ListFederated(bg(t), FederatedFilter{Federation: "fed", Kind: KindFederatedJob}, 0, ""); !errors.Is(err, ErrClosed) {
		t.Errorf("list after close: %v, want ErrClosed", err)
	}
}
