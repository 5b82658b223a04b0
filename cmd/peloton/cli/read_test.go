package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	pelotonv1 "github.com/peloton-sched/peloton/proto/peloton/api/v1"
)

// fakeDial stands for a.withClient: it counts dials and hands fn a name.
type fakeDial struct{ dials int }

func (d *fakeDial) dial(fn func(string) error) error {
	d.dials++
	return fn("conn")
}

func TestReadOrder(t *testing.T) {
	errPrepare, errFetch := errors.New("bad --state"), errors.New("unavailable")
	poolsResp := &pelotonv1.ListPoolsResponse{Pools: []*pelotonv1.Pool{{Path: "/a"}, {Path: "/b"}}}
	show := listed("pools", (*pelotonv1.ListPoolsResponse).GetPools, func(w io.Writer, pools []*pelotonv1.Pool, _ bool) {
		for _, p := range pools {
			fmt.Fprintln(w, p.GetPath())
		}
	})
	for _, tc := range []struct {
		name               string
		output             string
		prepare            func() error
		fetchErr           error
		wantErr            string
		wantDials          int
		wantOut            string
		wantFetched, usage bool
	}{
		{name: "bad -o costs nothing", output: "xml", prepare: func() error { return errPrepare }, wantErr: `invalid --output "xml"`, usage: true},
		{name: "bad flags cost no dial", output: "table", prepare: func() error { return errPrepare }, wantErr: errPrepare.Error()},
		{name: "call fails", output: "table", fetchErr: errFetch, wantErr: errFetch.Error(), wantDials: 1, wantFetched: true},
		{name: "table", output: "table", wantDials: 1, wantFetched: true, wantOut: "/a\n/b\n"},
		{name: "json", output: "json", wantDials: 1, wantFetched: true, wantOut: `"path": "/b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			a := &app{stdout: &out, output: tc.output}
			d := &fakeDial{}
			fetched := false
			err := read(a, d.dial, tc.prepare, func(c string) (*pelotonv1.ListPoolsResponse, error) {
				fetched = true
				if c != "conn" {
					t.Errorf("fetch got %q, not the dialled client", c)
				}
				return poolsResp, tc.fetchErr
			}, show)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
			if tc.usage != isUsage(err) {
				t.Fatalf("usage error %v, want %v", isUsage(err), tc.usage)
			}
			if d.dials != tc.wantDials || fetched != tc.wantFetched {
				t.Fatalf("dials %d fetched %v, want %d %v", d.dials, fetched, tc.wantDials, tc.wantFetched)
			}
			if !strings.Contains(out.String(), tc.wantOut) || (tc.wantOut == "" && out.Len() > 0) {
				t.Fatalf("output %q, want %q", out.String(), tc.wantOut)
			}
		})
	}
}

func TestListedEmpty(t *testing.T) {
	var out bytes.Buffer
	show := listed("pools", (*pelotonv1.ListPoolsResponse).GetPools, writePoolTable)
	if err := show(&printer{w: &out, format: formatJSON}, &pelotonv1.ListPoolsResponse{}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "{\n  \"pools\": []\n}\n" {
		t.Fatalf("empty list as %q, want an empty pools array", out.String())
	}
}
