package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// Output formats (-o). wide is table with more columns.
const (
	formatTable = "table"
	formatWide  = "wide"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// printer writes what a command shows in the format -o asked for.
type printer struct {
	w      io.Writer
	format string
	// jsonpath is the template of -o jsonpath, columns the columns of -o
	// custom-columns.
	jsonpath *jpTemplate
	columns  []column
	// noHeaders is --no-headers: tables and custom columns without their
	// header row.
	noHeaders bool
}

// printer validates -o; call it before making any API call so a typo costs
// nothing.
func (a *app) printer() (*printer, error) {
	return parseOutput(a.stdout, a.output, a.noHeaders)
}

// structured reports whether -o asked for a document (JSON or YAML, or a
// scripting format read from the JSON) rather than a table.
func (p *printer) structured() bool {
	return p.format == formatJSON || p.format == formatYAML || p.scripting()
}

// object writes m as a document, or calls table with a tabwriter for the
// table formats.
func (p *printer) object(m proto.Message, table func(w io.Writer, wide bool)) error {
	return p.render(m, "", table)
}

// render is object for m, whose list of items has the JSON name field (""
// for a single object): the table formats call table, the others print
// m's JSON.
func (p *printer) render(m proto.Message, field string, table func(w io.Writer, wide bool)) error {
	if p.structured() {
		b, err := marshalJSON(m)
		if err != nil {
			return err
		}
		return p.emit(b, m.ProtoReflect().Descriptor(), field)
	}
	var w io.Writer = p.w
	if p.noHeaders {
		w = &headless{w: p.w}
	}
	tw := newTabWriter(w)
	table(tw, p.format == formatWide)
	return tw.Flush()
}

// list is object for a List response whose repeated field (JSON name field)
// holds n items. An empty list is shown as {"field": []}, not {}, so scripts
// can always iterate over it.
func (p *printer) list(resp proto.Message, field string, n int, table func(w io.Writer, wide bool)) error {
	if n == 0 && p.structured() {
		b, err := json.Marshal(map[string][]any{field: {}})
		if err != nil {
			return err
		}
		return p.emit(b, resp.ProtoReflect().Descriptor(), field)
	}
	return p.render(resp, field, table)
}

// changed prints what a command that changes something did: line for the
// table formats; for the document formats, the object as the server has
// it now, which get fetches (a change's own answer is empty).
func (p *printer) changed(line string, get func() (proto.Message, error)) error {
	if !p.structured() {
		_, err := fmt.Fprintln(p.w, line)
		return err
	}
	m, err := get()
	if err != nil {
		return err
	}
	return p.object(m, nil)
}

// deleted prints that a command removed something there is no more of to
// show: line for the table formats; for the document formats a document
// naming it, {"deleted": true, key: id}; for -o name, kind/id.
func (p *printer) deleted(kind, key, id, line string) error {
	if !p.structured() {
		_, err := fmt.Fprintln(p.w, line)
		return err
	}
	if p.format == formatName {
		_, err := fmt.Fprintf(p.w, "%s/%s\n", kind, id)
		return err
	}
	b, err := deletedDoc(key, id)
	if err != nil {
		return err
	}
	return p.emit(b, nil, "")
}

// document writes compact JSON b as indented JSON or as YAML.
func (p *printer) document(b []byte) error {
	if p.format == formatYAML {
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = p.w.Write(y)
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err := p.w.Write(out.Bytes())
	return err
}

// marshalJSON is the protobuf JSON mapping of m (camelCase names), compact.
// Every field is printed, zero values included (instanceId: 0, exitCode: 0,
// an unset message as null), so a script can read any field of any object
// without knowing which values protobuf leaves out. protojson's own multiline output varies its
// whitespace between builds on purpose; document indents it stably instead.
//
// 64-bit integers are numbers (memoryUsedMb: 56), not the strings protojson
// writes for JavaScript's sake: a script reading the CLI's output compares
// them as numbers, as it does every other number there.
func marshalJSON(m proto.Message) ([]byte, error) {
	b, err := protojson.MarshalOptions{EmitUnpopulated: true, UseProtoNames: false}.Marshal(m)
	if err != nil {
		return nil, err
	}
	return int64sAsNumbers(b, m.ProtoReflect().Descriptor())
}

// jsonShape is what the proto says a JSON value holds: a message (an object
// keyed by field names), a map (an object keyed by map keys), a list, or a
// 64-bit integer protojson wrote as a string. The zero shape is a value
// left as it is.
type jsonShape struct {
	msg    protoreflect.MessageDescriptor
	mapVal protoreflect.FieldDescriptor
	list   protoreflect.FieldDescriptor
	int64  bool
}

// messageShape is the shape of a message's JSON. The well-known types have
// JSON of their own (a Timestamp is a string, a Struct any object) and are
// left as they are, but for the 64-bit integer wrappers.
func messageShape(md protoreflect.MessageDescriptor) jsonShape {
	switch md.FullName() {
	case "google.protobuf.Int64Value", "google.protobuf.UInt64Value":
		return jsonShape{int64: true}
	}
	if md.ParentFile().Package() == "google.protobuf" {
		return jsonShape{}
	}
	return jsonShape{msg: md}
}

// elemShape is the shape of one value of field fd: the field's own for a
// singular field, one element's for a list, one map value's for a map.
func elemShape(fd protoreflect.FieldDescriptor) jsonShape {
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return jsonShape{int64: true}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return messageShape(fd.Message())
	}
	return jsonShape{}
}

// fieldShape is the shape of field fd's whole value.
func fieldShape(fd protoreflect.FieldDescriptor) jsonShape {
	switch {
	case fd.IsMap():
		return jsonShape{mapVal: fd.MapValue()}
	case fd.IsList():
		return jsonShape{list: fd}
	}
	return elemShape(fd)
}

// int64sAsNumbers rewrites protojson's compact output b of a message md,
// writing the fields the proto declares as 64-bit integers as numbers. It
// goes token by token, so the fields keep protojson's order (the proto's).
func int64sAsNumbers(b []byte, md protoreflect.MessageDescriptor) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out bytes.Buffer
	out.Grow(len(b))
	if err := rewriteJSON(dec, &out, messageShape(md)); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func rewriteJSON(dec *json.Decoder, out *bytes.Buffer, shape jsonShape) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			out.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out.WriteByte(',')
				}
				var elem jsonShape
				if shape.list != nil {
					elem = elemShape(shape.list)
				}
				if err := rewriteJSON(dec, out, elem); err != nil {
					return err
				}
			}
			_, err := dec.Token() // ]
			out.WriteByte(']')
			return err
		}
		out.WriteByte('{')
		for i := 0; dec.More(); i++ {
			key, err := dec.Token()
			if err != nil {
				return err
			}
			if i > 0 {
				out.WriteByte(',')
			}
			k, _ := key.(string)
			if err := writeJSONString(out, k); err != nil {
				return err
			}
			out.WriteByte(':')
			var val jsonShape
			switch {
			case shape.msg != nil:
				if fd := shape.msg.Fields().ByJSONName(k); fd != nil {
					val = fieldShape(fd)
				}
			case shape.mapVal != nil:
				val = elemShape(shape.mapVal)
			}
			if err := rewriteJSON(dec, out, val); err != nil {
				return err
			}
		}
		_, err := dec.Token() // }
		out.WriteByte('}')
		return err
	case string:
		if shape.int64 && isInteger(t) {
			out.WriteString(t)
			return nil
		}
		return writeJSONString(out, t)
	case json.Number:
		out.WriteString(t.String())
	case bool:
		out.WriteString(strconv.FormatBool(t))
	case nil:
		out.WriteString("null")
	}
	return nil
}

// writeJSONString writes s as a JSON string as protojson does: "->" and
// "&" in a message stay as they are, not \u003e.
func writeJSONString(out *bytes.Buffer, s string) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	out.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	return nil
}

// isInteger reports whether s is a decimal integer that fits 64 bits, as
// protojson writes an int64 or a uint64.
func isInteger(s string) bool {
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return true
	}
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
}

func row(w io.Writer, cells ...string) {
	for i, c := range cells {
		switch {
		case c == "":
			// An empty cell would make the columns hard to read and to cut.
			cells[i] = "-"
		case strings.ContainsAny(c, "\t\n"):
			cells[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
		}
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// writeJobTable writes jobs as a table; wide adds the goal state, the spec
// version in force and the message.
func writeJobTable(w io.Writer, jobs []*pelotonv1.Job, wide bool) {
	writeJobColumns(w, jobs, wide, false)
}

// writeJobDetail is job get's table: a long-running job's row adds how many
// instances serve (HEALTHY) and how many of those run the spec in force
// (UPDATED), which the server counts for GetJob only; then the message,
// which the table shows for -o wide only, since why a job waits or failed
// is what a user asks job get first.
func writeJobDetail(w io.Writer, job *pelotonv1.Job, wide bool) {
	writeJobColumns(w, []*pelotonv1.Job{job}, wide, job.GetSpec().GetType() != pelotonv1.JobType_BATCH)
	if msg := job.GetStatus().GetMessage(); msg != "" && !wide {
		fmt.Fprintf(w, "\nmessage: %s\n", msg)
	}
	if job.GetStatus().GetArchived() {
		fmt.Fprintf(w, "\narchived: the job finished and was moved to the archive of finished jobs; it can no longer change (job delete purges it)\n")
	}
	writeReservation(w, job.GetStatus().GetReservation())
}

// writeReservation writes the hosts set aside for one of a job's gangs:
// which gang, since when, whether they hold it whole yet, and per host
// what it holds (CPU/memory MiB) and how much of that is idle.
func writeReservation(w io.Writer, r *pelotonv1.GangReservation) {
	if r == nil {
		return
	}
	gang := fmt.Sprintf("instances %d-%d", r.GetFirstInstance(), r.GetFirstInstance()+max(r.GetMembers(), 1)-1)
	if r.GetGang() != "" {
		gang = fmt.Sprintf("gang %s (%s)", r.GetGang(), gang)
	}
	state := "setting hosts aside as they free up; only preemptible work may use them meanwhile"
	if r.GetComplete() {
		state = "complete: the hosts hold the whole gang, their preemptible work is being preempted"
	}
	hosts := fmt.Sprintf("%d hosts", len(r.GetHosts()))
	if len(r.GetHosts()) == 1 {
		hosts = "1 host"
	}
	fmt.Fprintf(w, "\nreservation: %s in pool %s since %s, %s; %s\n", gang, r.GetPool(), timestamp(r.GetSince()), hosts, state)
	if len(r.GetHosts()) == 0 {
		return
	}
	fmt.Fprintln(w, "HOST\tHELD CPU/MEM\tIDLE CPU/MEM\tSINCE")
	for _, h := range r.GetHosts() {
		row(w, h.GetName(), cpuMem(h.GetHeld()), cpuMem(h.GetFree()), timestamp(h.GetSince()))
	}
}

// writeJobColumns is writeJobTable with the HEALTHY and UPDATED columns
// asked for separately.
func writeJobColumns(w io.Writer, jobs []*pelotonv1.Job, wide, health bool) {
	head := []string{"ID", "NAME", "TYPE", "POOL", "STATE", "INSTANCES", "TASKS"}
	if health {
		head = append(head, "HEALTHY", "UPDATED")
	}
	head = append(head, "CREATED")
	if wide {
		head = append(head, "GOAL", "SPEC VERSION", "MESSAGE")
	}
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, j := range jobs {
		spec, st := j.GetSpec(), j.GetStatus()
		cells := []string{
			j.GetId(),
			spec.GetName(),
			spec.GetType().String(),
			spec.GetPool(),
			jobState(st),
			strconv.FormatUint(uint64(spec.GetInstanceCount()), 10),
			taskCounts(st.GetTaskCounts()),
		}
		if health {
			cells = append(cells, strconv.FormatUint(uint64(st.GetHealthy()), 10), strconv.FormatUint(uint64(st.GetUpdated()), 10))
		}
		cells = append(cells, timestamp(st.GetCreateTime()))
		if wide {
			cells = append(cells, st.GetGoalState().String(), strconv.FormatUint(st.GetSpecVersion(), 10), st.GetMessage())
		}
		row(w, cells...)
	}
}

// jobState is a job's state as tables show it: an archived job's says so
// ("JOB_SUCCEEDED (archived)").
func jobState(st *pelotonv1.JobStatus) string {
	if st.GetArchived() {
		return st.GetState().String() + " (archived)"
	}
	return st.GetState().String()
}

// taskCounts renders counts per task state in lifecycle order, e.g.
// "RUNNING=2 SUCCEEDED=1", leaving out zeros.
func taskCounts(counts map[string]uint32) string {
	order := func(name string) int32 {
		if v, ok := pelotonv1.TaskState_value[name]; ok {
			return v
		}
		return 1 << 30 // unknown names last
	}
	names := slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		if oa, ob := order(a), order(b); oa != ob {
			return int(oa - ob)
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(names))
	for _, n := range names {
		if c := counts[n]; c > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", n, c))
		}
	}
	return strings.Join(parts, " ")
}

func timestamp(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// writeTaskTable writes tasks as a table; wide adds goal state, run,
// failures, the long-running columns and the message.
func writeTaskTable(w io.Writer, tasks []*pelotonv1.Task, wide bool) {
	writeTaskColumns(w, tasks, wide, wide)
}

// writeTaskColumns is writeTaskTable with the long-running columns (spec
// version, health, bound host, ports, and the run's usage as its host
// agent last reported it) asked for separately: `task get` always shows
// them.
func writeTaskColumns(w io.Writer, tasks []*pelotonv1.Task, wide, long bool) {
	head := []string{"INSTANCE", "TASK ID", "STATE", "HOST", "EXIT", "REASON"}
	// A revocable job's tasks say so (they run on slack, and their host's
	// QoS controller may kill them); other lists keep their columns.
	revocable := slices.ContainsFunc(tasks, func(t *pelotonv1.Task) bool { return t.GetStatus().GetRevocable() })
	if revocable {
		head = append(head, "REVOCABLE")
	}
	if wide {
		head = append(head, "GOAL", "RUN", "FAILURES")
	}
	if long {
		head = append(head, "SPEC VERSION", "HEALTH", "BOUND HOST", "PORTS", "CPU USED", "MEM USED", "P99")
	}
	if wide {
		head = append(head, "MESSAGE")
	}
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, t := range tasks {
		st := t.GetStatus()
		reason := st.GetReason()
		if reason == "" {
			// Why a task is not running yet is what users look for first.
			reason = st.GetPendingReason()
		}
		cells := []string{
			strconv.FormatUint(uint64(t.GetInstanceId()), 10),
			t.GetTaskId(),
			st.GetState().String(),
			st.GetHost(),
			exitCodeCell(st),
			reason,
		}
		if revocable {
			cells = append(cells, map[bool]string{true: "yes", false: "no"}[st.GetRevocable()])
		}
		if wide {
			cells = append(cells,
				st.GetGoalState().String(),
				strconv.FormatUint(uint64(st.GetRunId()), 10),
				strconv.FormatUint(uint64(st.GetFailureCount()), 10),
			)
		}
		if long {
			cpuUsed, memUsed := "", ""
			if u := st.GetUsage(); u != nil {
				cpuUsed, memUsed = strconv.FormatFloat(u.GetCpu(), 'f', 2, 64), strconv.FormatInt(u.GetMemoryUsedMb(), 10)
			}
			cells = append(cells, specVersionCell(st), healthCell(st.GetHealth()), st.GetBoundHost(), ports(st.GetPorts()), cpuUsed, memUsed,
				latencyCell(st.GetUsage().GetLatencyP99Seconds()))
		}
		if wide {
			cells = append(cells, st.GetMessage())
		}
		row(w, cells...)
	}
}

// writeTaskDetail is task get's table: the instance with the long-running
// columns, then its history of state changes, oldest first (the server
// keeps the latest few), so why a run ended or was replaced is on screen.
func writeTaskDetail(w io.Writer, task *pelotonv1.Task, wide bool) {
	writeTaskColumns(w, []*pelotonv1.Task{task}, wide, true)
	hist := task.GetStatus().GetHistory()
	if len(hist) == 0 {
		return
	}
	// The blank line ends the task's column block, so the history's columns
	// are aligned on their own.
	fmt.Fprintln(w, "\nHISTORY")
	fmt.Fprintln(w, "TIME\tRUN\tSTATE\tREASON")
	for _, h := range hist {
		row(w, timestamp(h.GetTime()), strconv.FormatUint(uint64(h.GetRunId()), 10), h.GetState().String(), h.GetReason())
	}
}

// latencyCell shows a latency in seconds as a duration of three significant
// digits ("12.5ms", "1.2s"): the buckets it is interpolated between are
// rarely finer. 0 is no reading, an empty cell (shown "-"); why there is
// none is in the usage's latencyError (-o json).
func latencyCell(seconds float64) string {
	switch {
	case !(seconds > 0):
		return ""
	case seconds > float64(math.MaxInt64/time.Second):
		// Beyond a Duration; no histogram has such buckets, but a
		// number is still a number.
		return strconv.FormatFloat(seconds, 'g', 3, 64) + "s"
	}
	d := time.Duration(math.Round(seconds * float64(time.Second)))
	unit := time.Duration(1)
	for unit*1000 <= d {
		unit *= 10
	}
	if d = d.Round(unit); d == 0 {
		d = 1 // below a nanosecond: the least a duration shows
	}
	return d.String()
}

// specVersionCell is the spec version a run runs, "1->2" while a restart
// onto another version is under way.
func specVersionCell(st *pelotonv1.TaskStatus) string {
	v, next := st.GetSpecVersion(), st.GetDesiredSpecVersion()
	switch {
	case v == 0:
		return ""
	case next != 0 && next != v:
		return fmt.Sprintf("%d->%d", v, next)
	}
	return strconv.FormatUint(v, 10)
}

// healthCell leaves HEALTH_UNKNOWN (no check, or none finished yet) empty,
// as JSON does.
func healthCell(h pelotonv1.HealthState) string {
	if h == pelotonv1.HealthState_HEALTH_UNKNOWN {
		return ""
	}
	return h.String()
}

// ports renders ports by name: "admin=8081,http=31000".
func ports(m map[string]uint32) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+strconv.FormatUint(uint64(m[k]), 10))
	}
	return strings.Join(parts, ",")
}

// exitCodeCell shows the exit code only for runs that ended: a zero exit
// code on a running task means nothing.
func exitCodeCell(st *pelotonv1.TaskStatus) string {
	switch st.GetState() {
	case pelotonv1.TaskState_SUCCEEDED, pelotonv1.TaskState_FAILED, pelotonv1.TaskState_KILLED:
		return strconv.FormatInt(int64(st.GetExitCode()), 10)
	}
	return ""
}

// writePoolTable writes pools as a table; resources are "cpu/memMb".
func writePoolTable(w io.Writer, pools []*pelotonv1.Pool, _ bool) {
	fmt.Fprintln(w, "PATH\tRESERVATION\tLIMIT\tSHARE\tENTITLEMENT\tALLOCATION\tDEMAND")
	for _, p := range pools {
		spec, st := p.GetSpec(), p.GetStatus()
		row(w,
			p.GetPath(),
			cpuMem(spec.GetReservation()),
			limitCell(spec.GetLimit()),
			cpuMem(spec.GetShare()),
			cpuMem(st.GetEntitlement()),
			cpuMem(st.GetAllocation()),
			cpuMem(st.GetDemand()),
		)
	}
}

func cpuMem(r *pelotonv1.Resources) string {
	if r == nil {
		return ""
	}
	return number(r.GetCpu()) + "/" + number(r.GetMemoryMb())
}

// limitCell renders a pool limit as "cpu/memMb". Limits are per kind and a
// kind left unset (0) is unlimited, so it reads "unlimited", never 0.
func limitCell(r *pelotonv1.Resources) string {
	one := func(v float64) string {
		if v == 0 {
			return "unlimited"
		}
		return number(v)
	}
	if r.GetCpu() == 0 && r.GetMemoryMb() == 0 {
		return "unlimited"
	}
	return one(r.GetCpu()) + "/" + one(r.GetMemoryMb())
}

func number(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// writeHostTable writes hosts as a table with used/total cpu and memory and
// what maintenance is doing.
func writeHostTable(w io.Writer, hosts []*pelotonv1.Host, _ bool, now time.Time) {
	fmt.Fprintln(w, "NAME\tSTATE\tPARTITION\tZONE\tCPU\tMEM\tTASKS\tCPU USED\tMEM USED\tREPORTED\tSLACK\tLABELS\tMESSAGE")
	for _, h := range hosts {
		used, total := h.GetAllocated(), h.GetCapacity()
		cpuUsed, memUsed, reported, slack := "", "", "", ""
		if u := h.GetUsage(); u != nil {
			cpuUsed = strconv.FormatFloat(u.GetCpu(), 'f', 2, 64)
			memUsed = strconv.FormatInt(u.GetMemoryUsedMb(), 10)
			reported = ago(u.GetReceiveTime(), now)
			// What revocable work may still take: cpu/memory.
			slack = number(h.GetSlack().GetCpu()) + "/" + number(h.GetSlack().GetMemoryMb())
		}
		row(w,
			h.GetName(),
			h.GetState().String(),
			hostPartition(h),
			zoneCell(h.GetZone()),
			number(used.GetCpu())+"/"+number(total.GetCpu()),
			number(used.GetMemoryMb())+"/"+number(total.GetMemoryMb()),
			strconv.FormatUint(uint64(h.GetTaskCount()), 10),
			cpuUsed, memUsed, reported, slack,
			labels(h.GetLabels()),
			hostMessage(h),
		)
	}
}

// zoneCell is a host's zone as the advisor last said it: green, orange,
// red, or empty while no advisor speaks.
func zoneCell(z pelotonv1.HostZone) string {
	switch z {
	case pelotonv1.HostZone_HOST_ZONE_GREEN:
		return "green"
	case pelotonv1.HostZone_HOST_ZONE_ORANGE:
		return "orange"
	case pelotonv1.HostZone_HOST_ZONE_RED:
		return "red"
	}
	return ""
}

// hostPartition is a host's partition, "from->to" while it moves.
func hostPartition(h *pelotonv1.Host) string {
	if t := h.GetTargetPartition(); t != "" {
		return h.GetPartition() + "->" + t
	}
	return h.GetPartition()
}

// hostMessage is what maintenance and a partition move say about a host,
// each thing said once. The server says what holds a drain per instance
// ("instance 0 of job web waits for its SLA (...)"), and a host that drains
// and moves says it in both messages; the column names each job once, with
// its instances as ranges: "job web: instances 0-1,3 wait for its SLA (...)".
func hostMessage(h *pelotonv1.Host) string {
	type group struct {
		prefix, rest string
		insts        []uint32
	}
	type jobNote struct {
		at     int // where in parts the job's note goes
		groups []*group
	}
	var parts []string
	seen := map[string]bool{}
	jobs := map[string]*jobNote{}
	var order []string
	for _, m := range []string{h.GetMaintenanceMessage(), h.GetPartitionMessage()} {
		if m == "" {
			continue
		}
		for _, p := range strings.Split(m, "; ") {
			if seen[p] {
				continue
			}
			seen[p] = true
			sm := instanceNote.FindStringSubmatch(p)
			if sm == nil {
				parts = append(parts, p)
				continue
			}
			inst, err := strconv.ParseUint(sm[2], 10, 32)
			if err != nil {
				parts = append(parts, p)
				continue
			}
			jn := jobs[sm[3]]
			if jn == nil {
				jn = &jobNote{at: len(parts)}
				jobs[sm[3]] = jn
				order = append(order, sm[3])
				parts = append(parts, "") // filled below
			}
			i := slices.IndexFunc(jn.groups, func(g *group) bool { return g.prefix == sm[1] && g.rest == sm[4] })
			if i < 0 {
				jn.groups = append(jn.groups, &group{prefix: sm[1], rest: sm[4]})
				i = len(jn.groups) - 1
			}
			jn.groups[i].insts = append(jn.groups[i].insts, uint32(inst))
		}
	}
	for _, job := range order {
		jn := jobs[job]
		gs := make([]string, 0, len(jn.groups))
		for _, g := range jn.groups {
			if len(g.insts) == 1 {
				gs = append(gs, fmt.Sprintf("%sinstance %d %s", g.prefix, g.insts[0], g.rest))
				continue
			}
			// The server's words are about one instance: "waits", "holds".
			what := g.rest
			for _, verb := range []string{"waits ", "holds "} {
				if r, ok := strings.CutPrefix(what, verb); ok {
					what = verb[:len(verb)-2] + " " + r
				}
			}
			gs = append(gs, fmt.Sprintf("%sinstances %s %s", g.prefix, instanceRanges(g.insts), what))
		}
		parts[jn.at] = "job " + job + ": " + strings.Join(gs, ", ")
	}
	return strings.Join(parts, "; ")
}

// instanceNote is how the server says what one instance does to a drain:
// "[STATEFUL ]instance N of job ID <what>".
var instanceNote = regexp.MustCompile(`^(STATEFUL )?instance (\d+) of job (\S+) (.+)$`)

func labels(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// writeUpdateTable writes updates as a table: versions from->to (->the
// rollback's copy of from, once rolled back), instances done of those to
// replace, failed, being replaced now; wide adds cause, batch size and times.
func writeUpdateTable(w io.Writer, updates []*pelotonv1.Update, wide bool) {
	head := []string{"ID", "JOB", "STATE", "VERSIONS", "DONE", "FAILED", "CURRENT"}
	if wide {
		head = append(head, "CAUSE", "BATCH", "CREATED", "COMPLETED")
	}
	head = append(head, "MESSAGE")
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, u := range updates {
		st := u.GetStatus()
		cells := []string{
			u.GetId(),
			u.GetJobId(),
			st.GetState().String(),
			updateVersions(u),
			fmt.Sprintf("%d/%d", st.GetInstancesDone(), st.GetInstancesTotal()),
			strconv.FormatUint(uint64(st.GetInstancesFailed()), 10),
			instanceRanges(st.GetInstancesCurrent()),
		}
		if wide {
			cells = append(cells,
				u.GetCause(),
				strconv.FormatUint(uint64(max(u.GetSpec().GetBatchSize(), 1)), 10),
				timestamp(st.GetCreateTime()),
				timestamp(st.GetCompletionTime()),
			)
		}
		cells = append(cells, st.GetMessage())
		row(w, cells...)
	}
}

// updateVersions is "1->2", "1->2->3" once rolling back to 3 (a copy of 1),
// or "2" for a rolling restart, which keeps the version.
func updateVersions(u *pelotonv1.Update) string {
	from, to := u.GetFromVersion(), u.GetToVersion()
	if from == to {
		return strconv.FormatUint(from, 10)
	}
	s := fmt.Sprintf("%d->%d", from, to)
	if rb := u.GetRollbackVersion(); rb != 0 {
		s += fmt.Sprintf("->%d", rb)
	}
	return s
}

// maxRanges bounds how many ranges instanceRanges writes out: a table cell
// for an update of thousands of instances must stay one readable line.
const maxRanges = 8

// instanceRanges renders instance IDs as sorted ranges, "0-3,7,9-10",
// ending in ",..." past maxRanges ranges.
func instanceRanges(ids []uint32) string {
	if len(ids) == 0 {
		return ""
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var parts []string
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] == sorted[j]+1 {
			j++
		}
		if len(parts) == maxRanges {
			parts = append(parts, "...")
			break
		}
		if i == j {
			parts = append(parts, strconv.FormatUint(uint64(sorted[i]), 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", sorted[i], sorted[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// writeVersionTable writes a job's spec history; wide adds the default
// command and image.
func writeVersionTable(w io.Writer, versions []*pelotonv1.JobVersion, wide bool) {
	head := []string{"VERSION", "CREATED", "INSTANCES", "CAUSE"}
	if wide {
		head = append(head, "COMMAND", "IMAGE")
	}
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, v := range versions {
		spec := v.GetSpec()
		cells := []string{
			strconv.FormatUint(v.GetVersion(), 10),
			timestamp(v.GetCreateTime()),
			strconv.FormatUint(uint64(spec.GetInstanceCount()), 10),
			v.GetCause(),
		}
		if wide {
			def := spec.GetDefaultSpec()
			cells = append(cells, strings.Join(def.GetCommand(), " "), def.GetImage())
		}
		row(w, cells...)
	}
}
