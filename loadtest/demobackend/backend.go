// Package demobackend is the demo upstream of the quick start, the tests and
// the load tests: an echo server with configurable latency and status, a
// health endpoint that can be switched off, and a capacity model for the
// overload scenario.
//
// The capacity model: the backend has Slots workers. A request waits for a
// free worker, then takes Latency to serve. While the queue is short, latency
// rises only with the wait; past the thrash point (more than Thrash × Slots
// requests waiting) every request's service time grows with the queue, as a
// real server that swaps, contends on locks or garbage-collects under
// overload: throughput falls below capacity. A request that waits longer than
// QueueTimeout gets 503. So an unprotected backend collapses under a 10×
// spike instead of serving its capacity.
package demobackend

import (
	"encoding/json"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Options configure a Backend.
type Options struct {
	Latency      time.Duration // service time of one request (default 0)
	Slots        int           // workers; 0: unlimited
	Thrash       float64       // queue length, in multiples of Slots, past which service slows (default 2)
	QueueTimeout time.Duration // longest wait for a worker before 503 (default 1s)
}

// Backend is the demo upstream.
type Backend struct {
	latency      atomic.Int64 // nanos
	slots        chan struct{}
	thrash       float64
	queueTimeout time.Duration
	healthy      atomic.Bool

	waiting  atomic.Int64
	inflight atomic.Int64
	served   atomic.Int64
	rejected atomic.Int64
}

// New returns a Backend.
func New(o Options) *Backend {
	if o.Thrash <= 0 {
		o.Thrash = 2
	}
	if o.QueueTimeout <= 0 {
		o.QueueTimeout = time.Second
	}
	b := &Backend{thrash: o.Thrash, queueTimeout: o.QueueTimeout}
	if o.Slots > 0 {
		b.slots = make(chan struct{}, o.Slots)
	}
	b.latency.Store(int64(o.Latency))
	b.healthy.Store(true)
	return b
}

// Stats are the backend's counters.
type Stats struct {
	Served   int64  `json:"served"`
	Rejected int64  `json:"rejected"`
	Inflight int64  `json:"inflight"`
	Waiting  int64  `json:"waiting"`
	Latency  string `json:"latency"`
	Healthy  bool   `json:"healthy"`
}

// Stats returns the counters.
func (b *Backend) Stats() Stats {
	return Stats{Served: b.served.Load(), Rejected: b.rejected.Load(), Inflight: b.inflight.Load(),
		Waiting: b.waiting.Load(), Latency: time.Duration(b.latency.Load()).String(), Healthy: b.healthy.Load()}
}

// Handler serves every request.
func (b *Backend) Handler(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	switch {
	case path == "/healthz":
		if !b.healthy.Load() {
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		}
		ctx.SetBodyString("ok\n")
		return
	case path == "/_backend/stats":
		writeJSON(ctx, b.Stats())
		return
	case path == "/_backend/config":
		b.configure(ctx)
		return
	}
	q := ctx.QueryArgs()
	if !b.acquire() {
		b.rejected.Add(1)
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetBodyString(`{"error":"backend overloaded"}`)
		return
	}
	b.inflight.Add(1)
	d := time.Duration(b.latency.Load())
	if s := q.Peek("sleep"); len(s) > 0 {
		if v, err := time.ParseDuration(string(s)); err == nil {
			d = v
		}
	}
	if b.slots != nil {
		// Thrashing: past the thrash point, service slows with the queue.
		if over := float64(b.waiting.Load()) / float64(cap(b.slots)); over > b.thrash {
			d = time.Duration(float64(d) * (1 + over - b.thrash))
		}
	}
	if d > 0 {
		time.Sleep(d)
	}
	b.inflight.Add(-1)
	b.release()
	b.served.Add(1)

	if c := q.Peek("cache"); len(c) > 0 {
		ctx.Response.Header.Set("Cache-Control", string(c))
	}
	status := fasthttp.StatusOK
	if s := q.Peek("status"); len(s) > 0 {
		if v, err := strconv.Atoi(string(s)); err == nil && v >= 100 && v < 600 {
			status = v
		}
	}
	if n := bytesPath(path); n >= 0 {
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/octet-stream")
		ctx.SetBody(make([]byte, n))
		return
	}
	ctx.SetStatusCode(status)
	writeJSON(ctx, map[string]any{
		"method":     string(ctx.Method()),
		"path":       path,
		"query":      string(ctx.QueryArgs().QueryString()),
		"tenant_key": string(ctx.Request.Header.Peek("X-API-Key")),
		"request_id": string(ctx.Request.Header.Peek("X-Request-Id")),
		"body_bytes": len(ctx.PostBody()),
	})
}

// acquire waits for a worker, at most QueueTimeout.
func (b *Backend) acquire() bool {
	if b.slots == nil {
		return true
	}
	select {
	case b.slots <- struct{}{}:
		return true
	default:
	}
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	t := time.NewTimer(b.queueTimeout)
	defer t.Stop()
	select {
	case b.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

func (b *Backend) release() {
	if b.slots != nil {
		<-b.slots
	}
}

// configure changes the latency or health at run time:
// POST /_backend/config?latency=40ms&healthy=false.
func (b *Backend) configure(ctx *fasthttp.RequestCtx) {
	q := ctx.QueryArgs()
	if v := q.Peek("latency"); len(v) > 0 {
		d, err := time.ParseDuration(string(v))
		if err != nil || d < 0 {
			ctx.SetStatusCode(fasthttp.StatusBadRequest)
			ctx.SetBodyString(`{"error":"latency: want a duration such as 40ms"}`)
			return
		}
		b.latency.Store(int64(d))
	}
	if v := q.Peek("healthy"); len(v) > 0 {
		b.healthy.Store(string(v) != "false")
	}
	writeJSON(ctx, b.Stats())
}

func bytesPath(path string) int {
	const prefix = "/bytes/"
	if len(path) <= len(prefix) || path[:len(prefix)] != prefix {
		return -1
	}
	n, err := strconv.Atoi(path[len(prefix):])
	if err != nil || n < 0 || n > 1<<30 {
		return -1
	}
	return n
}

func writeJSON(ctx *fasthttp.RequestCtx, v any) {
	out, _ := json.Marshal(v)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(out, '\n'))
}
