package casapply

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// held reports whether mu is locked now (by anyone).
func held(mu *sync.Mutex) bool {
	if mu.TryLock() {
		mu.Unlock()
		return false
	}
	return true
}

func TestDoStepsAndLocking(t *testing.T) {
	var mu sync.Mutex
	var steps []string
	got, err := Do(context.Background(), &mu, Change[string, int]{
		Check: func() (string, error) {
			steps = append(steps, "check")
			if !held(&mu) {
				t.Error("Check ran without the lock")
			}
			return "snap", nil
		},
		Write: func(_ context.Context, s string) (int64, error) {
			steps = append(steps, "write "+s)
			if held(&mu) {
				t.Error("Write ran under the lock")
			}
			return 42, nil
		},
		Apply: func(s string, rev int64) (int, error) {
			steps = append(steps, "apply "+s)
			if !held(&mu) {
				t.Error("Apply ran without the lock")
			}
			return int(rev) + len(s), nil
		},
	})
	if err != nil || got != 46 {
		t.Fatalf("Do = %d, %v; want 46, nil", got, err)
	}
	if want := []string{"check", "write snap", "apply snap"}; !slices.Equal(steps, want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	if held(&mu) {
		t.Fatal("lock still held after Do")
	}
}

func TestDoEndsEarly(t *testing.T) {
	refused := errors.New("refused")
	lost := errors.New("write lost")
	badApply := errors.New("cannot apply")
	otherType := Answer("seven")
	cases := []struct {
		name           string
		checkErr       error
		writeErr       error
		applyErr       error
		want           int
		wantErr        error
		wrote, applied bool
	}{
		{name: "check refuses: nothing written", checkErr: refused, wantErr: refused},
		{name: "check answers: nothing written, the answer returned", checkErr: Answer(7), want: 7},
		{name: "write fails: nothing applied, its error as it is", writeErr: lost, wantErr: lost, wrote: true},
		{name: "write answers: nothing applied, the answer returned", writeErr: Answer(9), want: 9, wrote: true},
		{name: "apply fails", applyErr: badApply, wantErr: badApply, wrote: true, applied: true},
		{name: "an answer of another type is an error", checkErr: otherType, wantErr: otherType},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			wrote, applied := false, false
			got, err := Do(context.Background(), &mu, Change[struct{}, int]{
				Check: func() (struct{}, error) { return struct{}{}, tc.checkErr },
				Write: func(context.Context, struct{}) (int64, error) { wrote = true; return 1, tc.writeErr },
				Apply: func(struct{}, int64) (int, error) { applied = true; return 1, tc.applyErr },
			})
			// The error itself, not a copy or a wrapping: callers' codes
			// and messages must come through as they made them.
			if err != tc.wantErr {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && got != tc.want {
				t.Fatalf("result %d, want %d", got, tc.want)
			}
			if wrote != tc.wrote || applied != tc.applied {
				t.Fatalf("wrote %v applied %v, want %v %v", wrote, applied, tc.wrote, tc.applied)
			}
			if held(&mu) {
				t.Fatal("lock still held after Do")
			}
		})
	}
}

func TestDoReleasesTheLockOnPanic(t *testing.T) {
	for _, step := range []string{"check", "apply"} {
		t.Run(step, func(t *testing.T) {
			var mu sync.Mutex
			func() {
				defer func() {
					if recover() == nil {
						t.Fatal("no panic")
					}
				}()
				_, _ = Do(context.Background(), &mu, Change[int, int]{
					Check: func() (int, error) {
						if step == "check" {
							panic("check")
						}
						return 0, nil
					},
					Write: func(context.Context, int) (int64, error) { return 0, nil },
					Apply: func(int, int64) (int, error) { panic("apply") },
				})
			}()
			if held(&mu) {
				t.Fatal("a panic left the lock held")
			}
		})
	}
}
