package history

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/peloton-sched/peloton/history/internal/historypb"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The federation's history is a second kind of record beside the
// clusters' jobs: Federated, one archived federated job or federated
// service, keyed by (federation, kind, id). The federation archives its
// objects under its own name, as a cluster archives its jobs under its
// own; the two kinds live apart, so a federated job and a cluster job of
// the same id never meet.

// Kind is what a Federated record holds.
type Kind int32

// The kinds of Federated records. The values are stored: never renumber.
const (
	// KindFederatedJob is a federated (batch) job, archived once it
	// finished and its TTL passed.
	KindFederatedJob Kind = 1
	// KindFederatedService is a federated service, archived when it was
	// deleted, with its rollouts (its final record holds them).
	KindFederatedService Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindFederatedJob:
		return "federated job"
	case KindFederatedService:
		return "federated service"
	}
	return "kind " + strconv.Itoa(int(k))
}

func (k Kind) valid() bool { return k == KindFederatedJob || k == KindFederatedService }

// Federated is one archived object of the federation.
type Federated struct {
	// Federation is the name the federation archives under (the store's
	// cluster name).
	Federation string
	// Kind says which of Job and Service is set.
	Kind Kind
	// ID is the object's id (the federated job's or service's).
	ID string
	// Job is the federated job's final record (KindFederatedJob).
	Job *pelotonv1.FederatedJob
	// Service is the federated service's final record, with its latest
	// rollout and the earlier ones (KindFederatedService).
	Service *pelotonv1.FederatedService
	// CreateTime is when the object was created (required: lists page by
	// it); FinishTime when it finished (a job's end, a service's delete).
	CreateTime, FinishTime time.Time
	// Labels are what ListFederated filters on (the job spec's labels).
	Labels map[string]string
	// ArchiveTime is when it was archived, by the caller's clock.
	ArchiveTime time.Time
}

// FederatedFilter selects archived objects of one federation and kind
// for ListFederated. Every filter that is set must hold.
type FederatedFilter struct {
	// Federation (required) and Kind (required).
	Federation string
	Kind       Kind
	// Labels selects objects that have every one of these labels, with
	// these values.
	Labels map[string]string
	// CreatedSince and CreatedUntil select objects created at or after
	// CreatedSince and before CreatedUntil (zero: no bound).
	CreatedSince, CreatedUntil time.Time
}

func fedPutOp(objs []*Federated) string {
	if len(objs) == 1 {
		return "put " + objs[0].Kind.String() + " " + objs[0].ID + " of federation " + objs[0].Federation
	}
	return fmt.Sprintf("put %d federated objects", len(objs))
}

func fedOp(verb, federation string, kind Kind, id string) string {
	return verb + " " + kind.String() + " " + id + " of federation " + federation
}

func fedNotFound(federation string, kind Kind, id string) error {
	return fmt.Errorf("history: %s %s of federation %s: %w", kind, id, federation, ErrNotFound)
}

// checkFedKey checks the key of GetFederated and DeleteFederated.
func checkFedKey(federation string, kind Kind, id string) error {
	if err := checkName("federation", federation, maxClusterLen, true); err != nil {
		return err
	}
	if !kind.valid() {
		return invalid("kind", "must be KindFederatedJob or KindFederatedService, got %d", int32(kind))
	}
	return checkName("id", id, maxIDLen, true)
}

func checkTime(field string, t time.Time, required bool) error {
	switch {
	case t.IsZero() && required:
		return invalid(field, "required: lists page by it")
	case t.IsZero():
		return nil
	case t.Before(minTime) || t.After(maxTime):
		return invalid(field, "%s is outside the years 1678 to 2262 that lists can sort", t.Format(time.RFC3339))
	}
	return nil
}

// checkFederated checks what PutFederated stores.
func checkFederated(objs []*Federated) error {
	type key struct {
		fed  string
		kind Kind
		id   string
	}
	seen := make(map[key]int, len(objs))
	for i, o := range objs {
		f := fmt.Sprintf("objects[%d]", i)
		if o == nil {
			return invalid(f, "required")
		}
		if err := checkName(f+".federation", o.Federation, maxClusterLen, true); err != nil {
			return err
		}
		if err := checkName(f+".id", o.ID, maxIDLen, true); err != nil {
			return err
		}
		switch o.Kind {
		case KindFederatedJob:
			if o.Job == nil {
				return invalid(f+".job", "required for a federated job")
			}
			if o.Service != nil {
				return invalid(f+".service", "must be unset for a federated job")
			}
			if o.Job.GetId() != o.ID {
				return invalid(f+".job.id", "%q is not the object's id %q", o.Job.GetId(), o.ID)
			}
		case KindFederatedService:
			if o.Service == nil {
				return invalid(f+".service", "required for a federated service")
			}
			if o.Job != nil {
				return invalid(f+".job", "must be unset for a federated service")
			}
			if o.Service.GetId() != o.ID {
				return invalid(f+".service.id", "%q is not the object's id %q", o.Service.GetId(), o.ID)
			}
		default:
			return invalid(f+".kind", "must be KindFederatedJob or KindFederatedService, got %d", int32(o.Kind))
		}
		k := key{o.Federation, o.Kind, o.ID}
		if prev, dup := seen[k]; dup {
			return invalid(f, "%s %s of federation %s is also objects[%d]", o.Kind, o.ID, o.Federation, prev)
		}
		seen[k] = i
		if err := checkTime(f+".createTime", o.CreateTime, true); err != nil {
			return err
		}
		if err := checkTime(f+".finishTime", o.FinishTime, false); err != nil {
			return err
		}
		for lk, lv := range o.Labels {
			if lk == "" {
				return invalid(f+".labels", "a label key must not be empty")
			}
			if err := checkText(f+".labels", lk); err != nil {
				return err
			}
			if err := checkText(f+".labels["+lk+"]", lv); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkFedFilter checks ListFederated's filter and page size and returns
// the page size to use.
func checkFedFilter(f FederatedFilter, size uint32) (int, error) {
	if err := checkName("federation", f.Federation, maxClusterLen, true); err != nil {
		return 0, err
	}
	if !f.Kind.valid() {
		return 0, invalid("kind", "must be KindFederatedJob or KindFederatedService, got %d", int32(f.Kind))
	}
	return checkFilter(Filter{Cluster: f.Federation, Labels: f.Labels, CreatedSince: f.CreatedSince, CreatedUntil: f.CreatedUntil}, size)
}

// fedMatches reports whether o passes the filters that are not the list's
// order (its labels).
func fedMatches(f FederatedFilter, o *Federated) bool {
	for k, v := range f.Labels {
		if got, ok := o.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// fedFormatV1 is the format byte of a Federated record: the
// ArchivedFederated message, marshalled deterministically, zstd.
const fedFormatV1 = 1

func encodeFederated(o *Federated) ([]byte, error) {
	rec := &historypb.ArchivedFederated{Federation: o.Federation, Kind: int32(o.Kind), Id: o.ID,
		CreateTime: timestamppb.New(o.CreateTime), Labels: o.Labels}
	switch o.Kind {
	case KindFederatedJob:
		rec.Object = &historypb.ArchivedFederated_Job{Job: o.Job}
	case KindFederatedService:
		rec.Object = &historypb.ArchivedFederated_Service{Service: o.Service}
	}
	if !o.FinishTime.IsZero() {
		rec.FinishTime = timestamppb.New(o.FinishTime)
	}
	if !o.ArchiveTime.IsZero() {
		rec.ArchiveTime = timestamppb.New(o.ArchiveTime)
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("history: encode %s %s: %w", o.Kind, o.ID, err)
	}
	return zenc.EncodeAll(raw, []byte{fedFormatV1}), nil
}

func decodeFederated(b []byte) (*Federated, error) {
	if len(b) == 0 || b[0] != fedFormatV1 {
		return nil, errors.New("not a federated record of a format this version knows")
	}
	raw, err := zdec.DecodeAll(b[1:], nil)
	if err != nil {
		return nil, fmt.Errorf("decompress: %w", err)
	}
	rec := &historypb.ArchivedFederated{}
	if err := proto.Unmarshal(raw, rec); err != nil {
		return nil, err
	}
	o := &Federated{Federation: rec.Federation, Kind: Kind(rec.Kind), ID: rec.Id, Job: rec.GetJob(), Service: rec.GetService(),
		CreateTime: rec.CreateTime.AsTime(), Labels: rec.Labels}
	if rec.FinishTime != nil {
		o.FinishTime = rec.FinishTime.AsTime()
	}
	if rec.ArchiveTime != nil {
		o.ArchiveTime = rec.ArchiveTime.AsTime()
	}
	return o, nil
}

// encodedFed is a Federated record ready to write.
type encodedFed struct {
	federation, id string
	kind           Kind
	createNanos    int64
	record         []byte
}

func encodeAllFederated(objs []*Federated) ([]encodedFed, error) {
	out := make([]encodedFed, len(objs))
	for i, o := range objs {
		rec, err := encodeFederated(o)
		if err != nil {
			return nil, err
		}
		out[i] = encodedFed{federation: o.Federation, id: o.ID, kind: o.Kind, createNanos: timeNanos(o.CreateTime), record: rec}
	}
	return out, nil
}
