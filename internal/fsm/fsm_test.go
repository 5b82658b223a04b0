package fsm

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

type light int32

const (
	red light = iota + 1
	green
	amber
	off
)

func (l light) String() string {
	return map[light]string{red: "RED", green: "GREEN", amber: "AMBER", off: "OFF"}[l]
}

func table() *Table[light] {
	return New("light",
		From(green).To(amber, off),
		From(red).To(green, off),
		From(amber).To(red, off),
		From(off).To(),
	)
}

func TestAllowedAndCheck(t *testing.T) {
	tb := table()
	for _, tc := range []struct {
		from, to light
		ok       bool
	}{
		{red, green, true},
		{green, amber, true},
		{amber, red, true},
		{red, amber, false},
		{off, red, false},
		{off, off, true}, // staying is always allowed, even where nothing leaves
		{green, green, true},
	} {
		err := tb.Check(tc.from, tc.to)
		if (err == nil) != tc.ok || tb.Allowed(tc.from, tc.to) != tc.ok {
			t.Errorf("%s -> %s: err=%v, want ok=%v", tc.from, tc.to, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, ErrIllegal) || !strings.Contains(err.Error(), "light "+tc.from.String()+" -> "+tc.to.String())) {
			t.Errorf("%s -> %s: error %q does not name the table and states", tc.from, tc.to, err)
		}
	}
}

func TestSourcesTargetsHas(t *testing.T) {
	tb := table()
	if got := Names(tb.Sources(off)); !slices.Equal(got, []string{"RED", "GREEN", "AMBER"}) {
		t.Errorf("Sources(OFF) = %v, want enum order RED GREEN AMBER", got)
	}
	if got := tb.Sources(red); !slices.Equal(got, []light{amber}) {
		t.Errorf("Sources(RED) = %v", got)
	}
	if got := tb.Targets(green); !slices.Equal(got, []light{amber, off}) {
		t.Errorf("Targets(GREEN) = %v, want the row's order", got)
	}
	if !tb.Has(off) || tb.Has(light(9)) {
		t.Error("Has: want OFF present and 9 absent")
	}
	// Targets hands out a copy: changing it must not change the table.
	tg := tb.Targets(green)
	tg[0] = red
	if !tb.Allowed(green, amber) || tb.Allowed(green, red) {
		t.Error("Targets leaked the table's row")
	}
}

func TestRender(t *testing.T) {
	want := "# light transitions\nRED -> GREEN OFF\nGREEN -> AMBER OFF\nAMBER -> RED OFF\nOFF -> (none)\n"
	if got := table().Render(); got != want {
		t.Errorf("Render:\n%s\nwant:\n%s", got, want)
	}
}

func TestNewRefusesBadRows(t *testing.T) {
	for name, rows := range map[string][]Row[light]{
		"self": {From(red).To(red)},
		"dup":  {From(red).To(green), From(red).To(off)},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: New did not panic", name)
				}
			}()
			New("light", rows...)
		}()
	}
}
