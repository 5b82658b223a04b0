// Command histserver is a stand-in service for the latency end-to-end test
// (test/e2e/latency_test.go): it serves Prometheus text on
// 127.0.0.1:$PELOTON_PORT_HTTP/metrics with one client_golang histogram,
// request_seconds, and observes a fixed distribution into it every 100 ms
// rather than serving requests, so that the P99 the host agent reports is
// known in advance. It exits after 60 s, so that nothing outlives a test.
//
// Each tick observes 49 requests of 10 ms and one of 400 ms (2% slow). The
// test's buckets put every window's P99 at 0.375 s: rank 0.99 × 50n =
// 49.5n falls in (0.25, 0.5], holding n of the 50n, 49n below it, so
// 0.25 + 0.25 × (49.5n − 49n) / n. A tick and a scrape never overlap (one
// lock), so every window holds whole ticks and the answer is exact.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

const (
	tick     = 100 * time.Millisecond
	lifetime = 60 * time.Second
)

func main() {
	port := os.Getenv("PELOTON_PORT_HTTP")
	if port == "" {
		fmt.Fprintln(os.Stderr, "histserver: PELOTON_PORT_HTTP is not set")
		os.Exit(2)
	}
	reg := prometheus.NewRegistry()
	lat := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "request_seconds",
		Help:    "Latency of the requests this stand-in pretends to serve.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
	})
	reg.MustRegister(lat)

	var mu sync.Mutex
	gather := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mu.Lock()
		defer mu.Unlock()
		return reg.Gather()
	})
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for range t.C {
			mu.Lock()
			for range 49 {
				lat.Observe(0.010)
			}
			lat.Observe(0.400)
			mu.Unlock()
		}
	}()
	time.AfterFunc(lifetime, func() { os.Exit(0) })

	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "histserver:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintln(os.Stderr, "histserver: serving on", l.Addr())
	if err := srv.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, "histserver:", err)
		os.Exit(1)
	}
}
