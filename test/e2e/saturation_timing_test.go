package e2e

import (
	"io"
	"log"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/test/harness"
)

// saturationConns is the closed loop of the overload scenario's phase (e):
// 64 keep-alive connections, each sending its next request when the last one
// answered.
const saturationConns = 64

// BenchmarkSaturation is phase (e) of the overload scenario as a benchmark:
// the gateway built as app.go builds it from loadtest/overload.yaml, in front
// of a fast upstream (no latency, no worker limit), over loopback sockets,
// under 64 concurrent keep-alive connections with the PREMIUM key. The
// sub-benchmarks are the upstream alone (the baseline), the gateway with the
// adaptive layer and with adaptive.enabled: false. They report req/s and
// sheds/op (answers other than 200, and sentinel_shed_total, per request)
// and mode-changes (sentinel_adaptive_mode_transitions_total; the gateway's
// log is silenced so that the benchmark lines stay whole): a saturating load
// the backend can take must not be shed, nor served slower than without the
// adaptive layer.
func BenchmarkSaturation(b *testing.B) {
	log.SetOutput(io.Discard)
	b.Cleanup(func() { log.SetOutput(os.Stderr) })
	upstream := saturationUpstream(b)
	b.Run("direct", func(b *testing.B) { driveSaturation(b, upstream, "") })
	for _, c := range []struct{ name, enabled string }{{"adaptive=on", "true"}, {"adaptive=off", "false"}} {
		// One gateway per sub-benchmark, stopped before the next starts: the
		// adaptive layer reads the process's CPU, which the other would load.
		url, admin, stop := saturationGateway(b, upstream, c.enabled)
		b.Run(c.name, func(b *testing.B) { driveSaturation(b, url, admin) })
		stop()
	}
}

// saturationUpstream is a fasthttp server answering 200 at once.
func saturationUpstream(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{"ok":true}`) }}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// saturationGateway serves loadtest/overload.yaml with its upstream replaced
// and adaptive.enabled set, on free loopback ports, until stop.
func saturationGateway(b *testing.B, upstream, adaptiveEnabled string) (url, admin string, stop func()) {
	g := harness.Start(b, harness.ReadFile(b, "loadtest/overload.yaml"),
		"SENTINEL_UPSTREAMS_API_TARGETS="+upstream, "SENTINEL_ADAPTIVE_ENABLED="+adaptiveEnabled)
	return g.URL, g.Admin, g.Stop
}

// driveSaturation sends b.N requests on saturationConns connections and
// reports req/s and sheds/op; with admin, sentinel_shed_total counts too.
func driveSaturation(b *testing.B, url, admin string) {
	c := &fasthttp.Client{MaxConnsPerHost: saturationConns, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	shedBefore, modesBefore := 0.0, 0.0
	if admin != "" {
		shedBefore = harness.Scrape(b, admin, "sentinel_shed_total")
		modesBefore = harness.Scrape(b, admin, "sentinel_adaptive_mode_transitions_total")
	}
	var next, notOK atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range saturationConns {
		wg.Go(func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(url + "/work")
			req.Header.Set("X-API-Key", "prem-key")
			for next.Add(1) <= int64(b.N) {
				if err := c.Do(req, resp); err != nil {
					b.Error(err)
					return
				}
				if resp.StatusCode() != fasthttp.StatusOK {
					notOK.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	sheds := float64(notOK.Load())
	if admin != "" {
		sheds = max(sheds, harness.Scrape(b, admin, "sentinel_shed_total")-shedBefore)
		b.ReportMetric(harness.Scrape(b, admin, "sentinel_adaptive_mode_transitions_total")-modesBefore, "mode-changes")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(sheds/float64(b.N), "sheds/op")
}
