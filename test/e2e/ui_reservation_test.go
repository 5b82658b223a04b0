package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// TestUIGangReservation: `peloton up --reservation-after 1s`, three hosts
// of 4 CPU each holding 3.5 CPU of work, and a gang of two 3-CPU members
// (a host each) that cannot fit. Once it has waited, and a small job's placement round
// has seen the hosts, GetJob (REST) shows its reservation with the hosts
// set aside, and the job's page a Reservation card listing them.
func TestUIGangReservation(t *testing.T) {
	chromium := chromiumPath(t)
	bin := buildPeloton(t)
	st := startUIStack(t, bin, "--reservation-after", "1s")
	c := st.cluster
	restJSON(t, "POST", c+"/v1/jobs", `{"name":"fill","type":"BATCH","pool":"/default","instanceCount":3,
		"defaultSpec":{"command":["sleep","600"],"resources":{"cpu":3.5,"memoryMb":16}}}`, 200, nil)
	var created struct{ JobID string }
	restJSON(t, "POST", c+"/v1/jobs", `{"name":"big-gang","type":"BATCH","pool":"/default","instanceCount":2,"sla":{"minimumRunningInstances":2},
		"defaultSpec":{"command":["sleep","600"],"resources":{"cpu":3,"memoryMb":16}}}`, 200, &created)
	id := created.JobID
	var hosts []any
	for i := 0; len(hosts) < 2; i++ {
		if i == 20 {
			t.Fatalf("no reservation with two hosts for the gang: %v", getJSON(t, c+"/v1/jobs/"+id))
		}
		// A small job's placement round sees the hosts with room.
		restJSON(t, "POST", c+"/v1/jobs", fmt.Sprintf(`{"name":"small-%d","type":"BATCH","pool":"/default","instanceCount":1,
			"defaultSpec":{"command":["sleep","600"],"resources":{"cpu":0.1,"memoryMb":16}}}`, i), 200, nil)
		time.Sleep(500 * time.Millisecond)
		hosts, _ = dig(getJSON(t, c+"/v1/jobs/"+id), "job", "status", "reservation", "hosts").([]any)
	}
	testutil.Eventually(t, 10*time.Second, "the reservation names its pool", func() error {
		if p := dig(getJSON(t, c+"/v1/jobs/"+id), "job", "status", "reservation", "pool"); p != "/default" {
			return fmt.Errorf("pool %v", p)
		}
		return nil
	})
	host := dig(hosts[0].(map[string]any), "name").(string)

	b := newBrowser(t, chromium, 1280, 800)
	if err := b.Do(20*time.Second, chromedp.Navigate(c+"/ui/jobs/"+id)); err != nil {
		t.Fatal(err)
	}
	b.WaitJS(t, "the job page's reservation card with its hosts", `document.body.dataset.ready && document.querySelector("#reservation") && `+
		fmt.Sprintf(`document.querySelector("#reservation").innerText.includes("setting hosts aside") && document.querySelector('#reservation a[href="/ui/hosts/%s"]')`, host),
		45*time.Second)
	b.CheckNoJSErrors(t, "job page with a reservation")
}
