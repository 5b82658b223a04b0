package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/peloton-sched/peloton/cluster"
)

// startSimStack runs a whole cluster stack in this process - embedded etcd
// in dir, the sim backend, gRPC and REST on free loopback ports - and
// returns the base URL of its REST API and the function that stops it.
func startSimStack(t testing.TB, dir string) (string, func()) {
	t.Helper()
	logOut, level := io.Discard, slog.LevelError
	if os.Getenv("PELOTON_TEST_DEBUG") != "" {
		logOut, level = os.Stderr, slog.LevelDebug
	}
	ready := make(chan cluster.ReadyInfo, 1)
	cfg := cluster.Config{
		DataDir: dir, Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", EtcdListen: "127.0.0.1:0",
		Backend: "sim", Hosts: 4, ShutdownGrace: 200 * time.Millisecond,
		Logger:  slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level})),
		OnReady: func(r cluster.ReadyInfo) { ready <- r },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cluster.Run(ctx, cfg) }()
	var info cluster.ReadyInfo
	select {
	case info = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("stack did not start: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("stack did not become ready within 60s")
	}
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("stack stopped with error: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("stack did not stop within 30s")
		}
	}
	return "http://" + info.HTTPAddr, stop
}

// fuzzMethods are the methods a fuzzed request may use.
var fuzzMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead, http.MethodOptions}

// FuzzRESTGateway sends any method, path, query and body to the REST API
// of a real stack (cluster/api's HTTPHandler through internal/restgw on
// the sim backend). The server answers every request and stays up, never
// with a 5xx (malformed input is the client's fault), every error from
// /v1/ is the gateway's JSON status: a code and a message, and what the
// requests stored loads again when the stack restarts.
func FuzzRESTGateway(f *testing.F) {
	if testing.Short() {
		f.Skip("starts a whole stack")
	}
	dir := f.TempDir()
	base, stop := startSimStack(f, dir)
	hc := &http.Client{Timeout: 20 * time.Second}
	// Nothing the requests stored is invalid: a stack started again on
	// the same etcd loads it all (pools, jobs, updates are checked as they
	// load) and lists it.
	f.Cleanup(func() {
		stop()
		base, stop := startSimStack(f, dir)
		defer stop()
		for _, p := range []string{"/v1/pools", "/v1/jobs", "/v1/updates", "/v1/hosts"} {
			resp, err := hc.Get(base + p)
			if err != nil {
				f.Fatalf("after a restart: GET %s: %v", p, err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				f.Errorf("after a restart: GET %s: %d %.300s", p, resp.StatusCode, out)
			}
		}
	})
	job := `{"name":"fz","type":"BATCH","pool":"/default","instanceCount":1,"defaultSpec":{"command":["sleep","1"],"resources":{"cpu":0.1,"memoryMb":8}}}`
	for _, s := range []struct {
		method      uint8
		path, query string
		body        string
	}{
		{0, "jobs", "", ""},
		{0, "jobs", "pageSize=-1&pageToken=%ff&state=NOPE", ""},
		{0, "jobs", "pageSize=99999999999999999999", ""},
		{1, "jobs", "", job},
		{1, "jobs", "", strings.Replace(job, `"fz"`, `"fz","name":"dup"`, 1)},
		{1, "jobs", "", strings.Replace(job, `"cpu":0.1`, `"cpu":"NaN"`, 1)},
		{1, "jobs", "", strings.Replace(job, `"cpu":0.1`, `"cpu":"Infinity","gpu":-1`, 1)},
		{1, "jobs", "", strings.Replace(job, `"cpu":0.1`, `"cpu":1e308`, 1)},
		{1, "jobs", "", strings.Replace(job, `"instanceCount":1`, `"instanceCount":1e99`, 1)},
		{1, "jobs", "", strings.Replace(job, `"instanceCount":1`, `"instanceCount":100000`, 1)},
		{1, "jobs", "", strings.Replace(job, `"BATCH"`, `"DAEMON"`, 1)},
		{1, "jobs", "", strings.Replace(job, `"BATCH"`, `99`, 1)},
		{1, "jobs", "", strings.Replace(job, `"name":"fz"`, `"name":"\xff\u0000\ud800"`, 1)},
		{1, "jobs", "", strings.Replace(job, `"name":"fz"`, `"name":"`+strings.Repeat("n", 70000)+`"`, 1)},
		{1, "jobs", "", strings.Replace(job, `"pool":"/default"`, `"pool":"/nope/../default"`, 1)},
		{1, "jobs", "", strings.Replace(job, `"BATCH",`, `"BATCH","unknownField":1,`, 1)},
		{1, "jobs", "", `{"name":"x","labels":{"":"","a":"` + strings.Repeat("v", 2000) + `"}}`},
		{1, "jobs", "", `{"instanceSpecs":{"x":{}}}`},
		{1, "jobs", "", `{"instanceSpecs":{"4294967295":{"command":["x"]}},"instanceCount":1}`},
		{1, "jobs", "", `{"unknown":1}`},
		{1, "jobs", "", strings.Repeat("[", 10000)},
		{1, "jobs", "", `{"defaultSpec":` + strings.Repeat(`{"placement":`, 1000) + "1" + strings.Repeat("}", 1001)},
		{1, "jobs", "", `{}`},
		{1, "jobs", "", `null`},
		{1, "jobs", "", "not json"},
		{0, "jobs/", "", ""},
		{0, "jobs/nope", "", ""},
		{0, "jobs/%2e%2e/tasks/abc", "", ""},
		{0, "jobs/x/tasks/4294967296", "", ""},
		{0, "jobs/x/tasks/-1/logs", "offset=-5&limit=abc", ""},
		{3, "jobs/x", "", ""},
		{1, "jobs/x:scale", "", `{"instanceCount":4294967295}`},
		{1, "jobs/x:restart", "", `{"instances":[1,2,3]}`},
		{1, "jobs/x/updates", "", `{"updateSpec":{"batchSize":0}}`},
		{0, "pools", "", ""},
		{0, "pools/default", "", ""},
		{0, "pools/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r", "", ""},
		{1, "pools/team", "", `{"reservation":{"cpu":1},"limit":{"cpu":2}}`},
		{1, "pools/team/a", "", `{"reservation":{"cpu":0.5}}`},
		{1, "pools/team/b", "", `{"reservation":{"cpu":1},"limit":{"cpu":0.5}}`},
		{1, "pools/team", "", `{"share":{"cpu":"NaN"}}`},
		{1, "pools/Team!", "", `{}`},
		{2, "pools/team", "version=18446744073709551615", `{"reservation":{"cpu":1e300}}`},
		{2, "pools/team", "version=-1", `{"reservation":{"cpu":0.1}}`},
		{3, "pools/", "", ""},
		{3, "pools/default", "", ""},
		{1, "pools:move", "", `{"path":"/default","newParent":"/default"}`},
		{0, "hosts", "", ""},
		{1, "hosts:startMaintenance", "", `{"hosts":["sim-0000", ""]}`},
		{1, "hosts/nope:move", "", `{"partition":"BAD PARTITION"}`},
		{0, "partitions", "", ""},
		{0, "partitions/moves", "", ""},
		{1, "partitions:advise", "", `{"moves":[{}]}`},
		{0, "updates", "", ""},
		{0, "updates/nope", "", ""},
		{1, "updates/nope:abort", "", ""},
		{4, "jobs", "", ""},
		{5, "pools", "", ""},
		{6, "jobs", "", ""},
		{0, "%zz", "", ""},
		{0, "", "", ""},
		{0, "jobs", "a=%00&b=\x7f", ""},
	} {
		f.Add(s.method, s.path, s.query, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, method uint8, path, query string, body []byte) {
		m := fuzzMethods[int(method)%len(fuzzMethods)]
		u, err := url.Parse(base + "/v1/" + path)
		if err != nil {
			return // not a URL a client could send
		}
		u.RawQuery = query
		req, err := http.NewRequest(m, u.String(), bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			if strings.Contains(err.Error(), "invalid") || strings.Contains(err.Error(), "malformed") {
				return // the client refused to send it
			}
			t.Fatalf("%s %s: %v", m, u, err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s %s: reading the answer: %v", m, u, err)
		}
		t.Logf("%s %s: %d %.200s", m, u, resp.StatusCode, out)
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %s %q: %d %s", m, u, body, resp.StatusCode, out)
		}
		// A request line with a space or a control character is refused by
		// net/http itself, in plain text, before any handler sees it.
		reached := !strings.ContainsFunc(u.RequestURI(), func(r rune) bool { return r <= ' ' || r == 0x7f })
		if resp.StatusCode >= 400 && reached && m != http.MethodHead && strings.HasPrefix(req.URL.Path, "/v1/") {
			var st struct {
				Code    *int    `json:"code"`
				Message *string `json:"message"`
			}
			if err := json.Unmarshal(out, &st); err != nil || st.Code == nil || st.Message == nil {
				t.Fatalf("%s %s: %d answer is not a JSON status: %q", m, u, resp.StatusCode, out)
			}
		}
		// Whatever it was asked, the stack still answers.
		hz, err := hc.Get(base + "/healthz")
		if err != nil {
			t.Fatalf("after %s %s the stack is down: %v", m, u, err)
		}
		hz.Body.Close()
	})
}
