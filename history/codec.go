package history

import (
	"errors"
	"fmt"
	"math"

	"github.com/klauspost/compress/zstd"
	"github.com/peloton-sched/peloton/history/internal/historypb"
	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A record is one byte of format, then the ArchivedJob message, marshalled
// deterministically (the same job makes the same bytes, so archiving it
// again writes what is there) and compressed with zstd. The format byte
// lets a later encoding live beside this one in the same store.
const formatV1 = 1

// maxRecordBytes bounds what a record may decompress to, so that a corrupt
// record cannot exhaust memory. A 100,000-instance job with long histories
// takes a few tens of MiB uncompressed.
const maxRecordBytes = 1 << 30

var (
	zenc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	zdec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxRecordBytes))
)

// encode is the record of j.
func encode(j *Job) ([]byte, error) {
	rec := &historypb.ArchivedJob{
		Cluster:  j.Cluster,
		JobId:    j.ID,
		Versions: j.Versions,
		Status:   j.Status,
		Updates:  j.Updates,
		Runs:     encodeRuns(j.Tasks),
	}
	if !j.ArchiveTime.IsZero() {
		rec.ArchiveTime = timestamppb.New(j.ArchiveTime)
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("history: encode job %s: %w", j.ID, err)
	}
	return zenc.EncodeAll(raw, []byte{formatV1}), nil
}

// decode is the job of a record.
func decode(b []byte) (*Job, error) {
	if len(b) == 0 || b[0] != formatV1 {
		return nil, errors.New("not a record of a format this version knows")
	}
	raw, err := zdec.DecodeAll(b[1:], nil)
	if err != nil {
		return nil, fmt.Errorf("decompress: %w", err)
	}
	rec := &historypb.ArchivedJob{}
	if err := proto.Unmarshal(raw, rec); err != nil {
		return nil, err
	}
	tasks, err := decodeRuns(rec.Runs)
	if err != nil {
		return nil, err
	}
	j := &Job{Cluster: rec.Cluster, ID: rec.JobId, Versions: rec.Versions, Status: rec.Status, Tasks: tasks, Updates: rec.Updates}
	if rec.ArchiveTime != nil {
		j.ArchiveTime = rec.ArchiveTime.AsTime()
	}
	return j, nil
}

// Flags of Runs.flags.
const (
	flagRestartInPlace = 1 << iota
	flagRevocable
)

// strDict numbers the distinct strings of a job's runs; 0 is "".
type strDict struct {
	ids  map[string]uint32
	list []string
}

func (d *strDict) id(s string) uint32 {
	if s == "" {
		return 0
	}
	if i, ok := d.ids[s]; ok {
		return i
	}
	d.list = append(d.list, s)
	i := uint32(len(d.list))
	d.ids[s] = i
	return i
}

// Times lie within ±2^62 ns (1824 to 2116) to be a column's: then the
// difference of two never overflows an int64. Others go to Runs.rest.
const timeLimit = 1 << 62

func timeOf(ts *timestamppb.Timestamp) (ns int64, ok bool) {
	if ts == nil {
		return 0, true
	}
	const limitSec = timeLimit / 1_000_000_000
	if ts.Nanos < 0 || ts.Nanos >= 1e9 || ts.Seconds <= -limitSec || ts.Seconds >= limitSec {
		return 0, false
	}
	return ts.Seconds*1e9 + int64(ts.Nanos), true
}

// timeEnc writes the times column: 0 for unset, else 1 + zigzag(the
// difference from the previous set time).
type timeEnc struct {
	prev int64
	out  []uint64
}

// add appends ts and reports whether the column holds it; when it does
// not (a time beyond timeLimit) it appends an unset time.
func (e *timeEnc) add(ts *timestamppb.Timestamp) bool {
	ns, ok := timeOf(ts)
	if ts == nil || !ok {
		e.out = append(e.out, 0)
		return ok
	}
	d := ns - e.prev
	e.prev = ns
	e.out = append(e.out, uint64(d<<1^d>>63)+1)
	return true
}

type timeDec struct {
	prev int64
	in   []uint64
	i    int
	// none: the column was not stored, every time is unset.
	none bool
}

func (d *timeDec) next() (*timestamppb.Timestamp, error) {
	if d.none {
		return nil, nil
	}
	if d.i >= len(d.in) {
		return nil, errors.New("times column too short")
	}
	v := d.in[d.i]
	d.i++
	if v == 0 {
		return nil, nil
	}
	v--
	ns := d.prev + (int64(v>>1) ^ -int64(v&1))
	d.prev = ns
	return &timestamppb.Timestamp{Seconds: floorDiv(ns, 1e9), Nanos: int32(ns - floorDiv(ns, 1e9)*1e9)}, nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// encodeRuns puts the tasks' statuses into columns. It only reads them.
func encodeRuns(tasks []*pelotonv1.TaskStatus) *historypb.Runs {
	n := len(tasks)
	r := &historypb.Runs{Instances: uint32(n)}
	d := &strDict{ids: map[string]uint32{}}
	var (
		state, goal, health                       = make([]int32, 0, n), make([]int32, 0, n), make([]int32, 0, n)
		run, host, prevHost, boundHost            = make([]uint32, 0, n), make([]uint32, 0, n), make([]uint32, 0, n), make([]uint32, 0, n)
		reason, message, pending, failures, flags = make([]uint32, 0, n), make([]uint32, 0, n), make([]uint32, 0, n), make([]uint32, 0, n), make([]uint32, 0, n)
		exit                                      = make([]int32, 0, n)
		desiredRun                                = make([]int64, 0, n)
		specV, desiredSpecV                       = make([]uint64, 0, n), make([]uint64, 0, n)
		histLen                                   = make([]uint32, 0, n)
		hState                                    []int32
		hRun                                      []int64
		hReason                                   []uint32
		times                                     = timeEnc{out: make([]uint64, 0, 3*n)}
	)
	for inst, t := range tasks {
		if t == nil {
			r.Absent = append(r.Absent, uint32(inst))
			continue
		}
		state = append(state, int32(t.State))
		goal = append(goal, int32(t.GoalState))
		health = append(health, int32(t.Health))
		run = append(run, t.RunId)
		desiredRun = append(desiredRun, int64(t.DesiredRunId)-int64(t.RunId))
		host = append(host, d.id(t.Host))
		prevHost = append(prevHost, d.id(t.PreviousHost))
		boundHost = append(boundHost, d.id(t.BoundHost))
		exit = append(exit, t.ExitCode)
		reason = append(reason, d.id(t.Reason))
		message = append(message, d.id(t.Message))
		pending = append(pending, d.id(t.PendingReason))
		failures = append(failures, t.FailureCount)
		specV = append(specV, t.SpecVersion)
		desiredSpecV = append(desiredSpecV, t.DesiredSpecVersion)
		var fl uint32
		if t.RestartInPlace {
			fl |= flagRestartInPlace
		}
		if t.Revocable {
			fl |= flagRevocable
		}
		flags = append(flags, fl)

		rest := &pelotonv1.TaskStatus{Ports: t.Ports, Usage: t.Usage}
		rest.ProtoReflect().SetUnknown(t.ProtoReflect().GetUnknown())
		// An instance's transitions are in the columns only if every one
		// of them fits there; else they all go to rest.
		histInColumns := true
		for _, h := range t.History {
			if _, ok := timeOf(h.GetTime()); !ok || h == nil || len(h.ProtoReflect().GetUnknown()) > 0 {
				histInColumns = false
				break
			}
		}
		if histInColumns {
			histLen = append(histLen, uint32(len(t.History)))
			for _, h := range t.History {
				hState = append(hState, int32(h.State))
				hRun = append(hRun, int64(h.RunId)-int64(t.RunId))
				hReason = append(hReason, d.id(h.Reason))
				times.add(h.Time)
			}
		} else {
			histLen = append(histLen, 0)
			rest.History = t.History
		}
		if !times.add(t.StartTime) {
			rest.StartTime = t.StartTime
		}
		if !times.add(t.CompletionTime) {
			rest.CompletionTime = t.CompletionTime
		}
		if !times.add(t.UpdateTime) {
			rest.UpdateTime = t.UpdateTime
		}
		if proto.Size(rest) > 0 {
			if r.Rest == nil {
				r.Rest = map[uint32]*pelotonv1.TaskStatus{}
			}
			r.Rest[uint32(inst)] = rest
		}
	}
	r.Strings = d.list
	r.State, r.GoalState, r.Health = nonZero(state), nonZero(goal), nonZero(health)
	r.RunId, r.DesiredRunDelta = nonZero(run), nonZero(desiredRun)
	r.Host, r.PreviousHost, r.BoundHost = nonZero(host), nonZero(prevHost), nonZero(boundHost)
	r.ExitCode, r.Reason, r.Message, r.PendingReason = nonZero(exit), nonZero(reason), nonZero(message), nonZero(pending)
	r.FailureCount, r.Flags = nonZero(failures), nonZero(flags)
	r.SpecVersion, r.DesiredSpecVersion = nonZero(specV), nonZero(desiredSpecV)
	r.HistoryLen = nonZero(histLen)
	r.HistoryState, r.HistoryRunDelta, r.HistoryReason = nonZero(hState), nonZero(hRun), nonZero(hReason)
	r.Times = nonZero(times.out)
	return r
}

// nonZero is col, or nil when every value in it is zero: such a column is
// not stored at all.
func nonZero[T int32 | int64 | uint32 | uint64](col []T) []T {
	for _, v := range col {
		if v != 0 {
			return col
		}
	}
	return nil
}

// column reads one column of n values, empty meaning all zero.
type column[T int32 | int64 | uint32 | uint64] struct {
	name string
	v    []T
}

func (c column[T]) check(n int) error {
	if len(c.v) != 0 && len(c.v) != n {
		return fmt.Errorf("column %s has %d values for %d", c.name, len(c.v), n)
	}
	return nil
}

func (c column[T]) at(i int) T {
	if len(c.v) == 0 {
		return 0
	}
	return c.v[i]
}

// decodeRuns is the inverse of encodeRuns.
func decodeRuns(r *historypb.Runs) ([]*pelotonv1.TaskStatus, error) {
	if r == nil || r.Instances == 0 {
		return nil, nil
	}
	n := int(r.Instances)
	if len(r.Absent) > n {
		return nil, fmt.Errorf("%d absent instances of %d", len(r.Absent), n)
	}
	present := n - len(r.Absent)
	var (
		state   = column[int32]{"state", r.State}
		goal    = column[int32]{"goalState", r.GoalState}
		health  = column[int32]{"health", r.Health}
		exit    = column[int32]{"exitCode", r.ExitCode}
		run     = column[uint32]{"runId", r.RunId}
		dRun    = column[int64]{"desiredRunDelta", r.DesiredRunDelta}
		specV   = column[uint64]{"specVersion", r.SpecVersion}
		dSpecV  = column[uint64]{"desiredSpecVersion", r.DesiredSpecVersion}
		fails   = column[uint32]{"failureCount", r.FailureCount}
		flags   = column[uint32]{"flags", r.Flags}
		histLen = column[uint32]{"historyLen", r.HistoryLen}
		strs    = []column[uint32]{{"host", r.Host}, {"previousHost", r.PreviousHost}, {"boundHost", r.BoundHost},
			{"reason", r.Reason}, {"message", r.Message}, {"pendingReason", r.PendingReason}}
	)
	for _, err := range []error{state.check(present), goal.check(present), health.check(present), exit.check(present),
		run.check(present), dRun.check(present), specV.check(present), dSpecV.check(present), fails.check(present),
		flags.check(present), histLen.check(present)} {
		if err != nil {
			return nil, err
		}
	}
	for _, c := range strs {
		if err := c.check(present); err != nil {
			return nil, err
		}
	}
	transitions := 0
	for _, l := range histLen.v {
		transitions += int(l)
	}
	hState := column[int32]{"historyState", r.HistoryState}
	hRun := column[int64]{"historyRunDelta", r.HistoryRunDelta}
	hReason := column[uint32]{"historyReason", r.HistoryReason}
	for _, err := range []error{hState.check(transitions), hRun.check(transitions), hReason.check(transitions)} {
		if err != nil {
			return nil, err
		}
	}
	str := func(c column[uint32], i int) (string, error) {
		id := c.at(i)
		if id == 0 {
			return "", nil
		}
		if int(id) > len(r.Strings) {
			return "", fmt.Errorf("column %s names string %d of %d", c.name, id, len(r.Strings))
		}
		return r.Strings[id-1], nil
	}
	times := &timeDec{in: r.Times, none: len(r.Times) == 0}
	tasks := make([]*pelotonv1.TaskStatus, n)
	absent := r.Absent
	k, h := 0, 0 // the present instance and the transition being read
	for inst := 0; inst < n; inst++ {
		if len(absent) > 0 && absent[0] == uint32(inst) {
			absent = absent[1:]
			continue
		}
		if k == present {
			return nil, errors.New("absent instances out of order")
		}
		t := &pelotonv1.TaskStatus{
			State:              pelotonv1.TaskState(state.at(k)),
			GoalState:          pelotonv1.TaskState(goal.at(k)),
			Health:             pelotonv1.HealthState(health.at(k)),
			RunId:              run.at(k),
			ExitCode:           exit.at(k),
			FailureCount:       fails.at(k),
			SpecVersion:        specV.at(k),
			DesiredSpecVersion: dSpecV.at(k),
			RestartInPlace:     flags.at(k)&flagRestartInPlace != 0,
			Revocable:          flags.at(k)&flagRevocable != 0,
		}
		desired := int64(t.RunId) + dRun.at(k)
		if desired < 0 || desired > math.MaxUint32 {
			return nil, fmt.Errorf("instance %d: desired run %d out of range", inst, desired)
		}
		t.DesiredRunId = uint32(desired)
		dst := []*string{&t.Host, &t.PreviousHost, &t.BoundHost, &t.Reason, &t.Message, &t.PendingReason}
		for i, c := range strs {
			s, err := str(c, k)
			if err != nil {
				return nil, err
			}
			*dst[i] = s
		}
		if l := int(histLen.at(k)); l > 0 {
			t.History = make([]*pelotonv1.TaskTransition, l)
			for i := range t.History {
				reason, err := str(hReason, h)
				if err != nil {
					return nil, err
				}
				hr := int64(t.RunId) + hRun.at(h)
				if hr < 0 || hr > math.MaxUint32 {
					return nil, fmt.Errorf("instance %d: transition run %d out of range", inst, hr)
				}
				tm, err := times.next()
				if err != nil {
					return nil, err
				}
				t.History[i] = &pelotonv1.TaskTransition{State: pelotonv1.TaskState(hState.at(h)), RunId: uint32(hr), Time: tm, Reason: reason}
				h++
			}
		}
		var err error
		if t.StartTime, err = times.next(); err != nil {
			return nil, err
		}
		if t.CompletionTime, err = times.next(); err != nil {
			return nil, err
		}
		if t.UpdateTime, err = times.next(); err != nil {
			return nil, err
		}
		if rest := r.Rest[uint32(inst)]; rest != nil {
			proto.Merge(t, rest)
		}
		tasks[inst] = t
		k++
	}
	if k != present || len(absent) > 0 {
		return nil, errors.New("absent instances out of order")
	}
	if !times.none && times.i != len(times.in) {
		return nil, fmt.Errorf("times column has %d values, %d read", len(times.in), times.i)
	}
	return tasks, nil
}
