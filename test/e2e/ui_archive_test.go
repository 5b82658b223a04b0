package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/peloton-sched/peloton/internal/testing/testutil"
)

// TestUIArchivedJob: on a real `peloton up` whose finished jobs are
// archived at once (--finished-job-ttl 0s), a finished job leaves the live
// list and is read from the archive: the API marks it archived; its page
// says so, with no actions, and shows its instances; its task page shows
// the run's output (kept by --log-retention) without actions; the jobs page
// lists it only with the archived toggle.
func TestUIArchivedJob(t *testing.T) {
	chromium := chromiumPath(t)
	bin := buildPeloton(t)
	st := startUIStack(t, bin, "--finished-job-ttl", "0s", "--log-retention", "1h")
	c := st.cluster

	var created struct{ JobID string }
	restJSON(t, "POST", c+"/v1/jobs", `{"name":"archived-report","type":"BATCH","pool":"/default","instanceCount":3,
		"labels":{"owner":"report-team"},"defaultSpec":{"command":["sh","-c","echo archived output of $PELOTON_INSTANCE_ID"],
		"resources":{"cpu":0.1,"memoryMb":16}}}`, 200, &created)
	id := created.JobID
	testutil.Eventually(t, 90*time.Second, "the job finished and archived", func() error {
		j := getJSON(t, c+"/v1/jobs/"+id)
		if a := dig(j, "job", "status", "archived"); a != true {
			return fmt.Errorf("job is %v, archived %v", dig(j, "job", "status", "state"), a)
		}
		return nil
	})
	if s := dig(getJSON(t, c+"/v1/jobs/"+id), "job", "status", "state"); s != "JOB_SUCCEEDED" {
		t.Fatalf("archived job is %v, want JOB_SUCCEEDED", s)
	}
	if n := len(dig(getJSON(t, c+"/v1/jobs/"+id+"/tasks"), "tasks").([]any)); n != 3 {
		t.Fatalf("the archived job lists %d tasks, want 3", n)
	}
	if j := dig(getJSON(t, c+"/v1/jobs?archived=true&labels[owner]=report-team"), "jobs", 0, "id"); j != id {
		t.Fatalf("ListJobs archived with the job's label: first job %v, want %s", j, id)
	}
	if j := dig(getJSON(t, c+"/v1/jobs?name=archived-report"), "jobs", 0); j != nil {
		t.Fatalf("the live list still has the archived job: %v", j)
	}

	b := newBrowser(t, chromium, 1280, 800)
	text := func(s string) string { return fmt.Sprintf(`document.querySelector("main").innerText.includes(%q)`, s) }
	load := func(name, url, what, cond string) {
		t.Helper()
		if err := b.Do(20*time.Second, chromedp.Navigate(url)); err != nil {
			t.Fatalf("%s: open %s: %v", name, url, err)
		}
		b.WaitJS(t, name+": "+what, `document.body.dataset.ready && (`+cond+`)`, 45*time.Second)
		b.CheckNoJSErrors(t, name)
	}

	// The job's page: archived, with its instances and no actions.
	load("archived job", c+"/ui/jobs/"+id, "the archived badge, the note and the instance grid",
		`document.querySelector("h1 .badge.archived") && document.querySelector("#archived-note") && `+text("archived-report")+
			` && document.querySelector(".grid canvas") && `+text("SUCCEEDED 3")+` && !document.querySelector('[data-action="kill-job"]')`+
			` && !document.querySelector('[data-action="scale-job"]') && !document.querySelector('[data-action="restart-job"]')`)
	if err := b.Do(10*time.Second, chromedp.SetValue(chromedp.CSS(`input[aria-label="Go to instance"]`), "2"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('input[aria-label="Go to instance"]').dispatchEvent(new Event("change"))`)); err != nil {
		t.Fatal(err)
	}
	b.WaitJS(t, "instance 2 of the archived job, without a kill button", text("Instance 2")+` && document.querySelector(".instance table")`+
		` && !document.querySelector('[data-action="kill-task-2"]')`, 10*time.Second)
	b.CheckNoJSErrors(t, "archived job's instance")

	// The task page: the run's output, from the backend.
	load("archived task", c+"/ui/jobs/"+id+"/tasks/1", "the run's output, marked archived, without a kill button",
		`document.querySelector("pre.log") && document.querySelector("pre.log").textContent.includes("archived output of 1")`+
			` && document.querySelector("#archived-task .badge.archived") && !document.querySelector('[data-action="kill-task-1"]')`)

	// The jobs page lists the archived job only with the toggle.
	load("jobs", c+"/ui/jobs", "the live list without the archived job", text("0 of 0 jobs")+` && !`+text("archived-report"))
	if err := b.Do(10*time.Second, chromedp.Click(chromedp.CSS(`#jobs-archived`))); err != nil {
		t.Fatal(err)
	}
	b.WaitJS(t, "the archived jobs listed", `location.search === "?archived=true" && `+text("1 of 1 archived jobs")+` && `+text("archived-report")+
		` && document.querySelector("table .badge.archived")`, 15*time.Second)
	b.CheckNoJSErrors(t, "jobs archived")
	load("jobs archived link", c+"/ui/jobs?archived=true&name=report", "the deep link of the archived list",
		`document.querySelector("#jobs-archived").checked && `+text("archived-report"))
}
