package jobmgr

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fillEvery sets every field of m to a value that is not its zero value,
// found by reflection, so that a field added to the message later is set
// too.
func fillEvery(t *testing.T, m protoreflect.Message) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			mp.Set(protoreflect.ValueOfString("http").MapKey(), protoreflect.ValueOfUint32(8080))
		case fd.IsList():
			l := m.Mutable(fd).List()
			e := l.NewElement()
			fillEvery(t, e.Message())
			l.Append(e)
		case fd.Kind() == protoreflect.MessageKind:
			fillEvery(t, m.Mutable(fd).Message())
		default:
			m.Set(fd, nonZero(t, fd))
		}
	}
}

func nonZero(t *testing.T, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(fd.Enum().Values().Get(fd.Enum().Values().Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(fd.Number()))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(fd.Number()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(fd.Number()))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(fd.Number()))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(fd.Number()))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(fd.Number()))
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(fd.Name()))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fd.Name()))
	}
	t.Fatalf("field %s: kind %v not handled", fd.FullName(), fd.Kind())
	return protoreflect.Value{}
}

func TestCloneStatusCopiesEveryField(t *testing.T) {
	rt := &pelotonv1.TaskStatus{}
	fillEvery(t, rt.ProtoReflect())
	rt.ProtoReflect().SetUnknown(protoreflect.RawFields{0xf8, 0x07, 0x01}) // field 127, varint 1
	c := cloneStatus(rt)
	if !proto.Equal(c, rt) {
		t.Fatalf("the clone differs from the original:\n%v\n%v", c, rt)
	}
	if string(c.ProtoReflect().GetUnknown()) != string(rt.ProtoReflect().GetUnknown()) {
		t.Fatal("unknown fields not kept")
	}
}

// TestCloneStatusIsIndependent: the changes applyTaskVia makes to a clone
// (fields set, a transition appended, ports replaced or set) never show in
// the original, which API calls read and which stays when a write fails.
func TestCloneStatusIsIndependent(t *testing.T) {
	rt := &pelotonv1.TaskStatus{State: taskRunning, Host: "h1", Ports: map[string]uint32{"http": 1},
		History: make([]*pelotonv1.TaskTransition, 1, 8)}
	rt.History[0] = &pelotonv1.TaskTransition{State: taskLaunched}
	want := proto.Clone(rt)

	c := cloneStatus(rt)
	c.State, c.Host, c.StartTime = taskSucceeded, "h2", timestamppb.Now()
	c.Ports["http"] = 2
	c.History = append(c.History, &pelotonv1.TaskTransition{State: taskSucceeded})
	d := cloneStatus(rt)
	d.History = append(d.History, &pelotonv1.TaskTransition{State: taskFailed})

	if !proto.Equal(rt, want) {
		t.Fatalf("the original changed with its clones:\n%v\nwant\n%v", rt, want)
	}
	if c.History[1].State != taskSucceeded || d.History[1].State != taskFailed {
		t.Fatalf("two clones' appended transitions overwrote each other: %v, %v", c.History[1].State, d.History[1].State)
	}
}
