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
//
// With ShedDepth the backend sheds instead of queueing without bound, as
// well-behaved servers do: a request that finds more than ShedDepth requests
// already waiting gets 503 at once (with Retry-After when RetryAfter is set),
// and the queue never reaches the thrash point when ShedDepth is below it.
//
// The fixed-response mode (FixedBody > 0) answers every request with the same
// 200 and FixedBody bytes, with no latency, no echo and no allocation: the
// upstream of the gateway-against-nginx comparison, so that what is measured
// is the proxy and not the backend.
package demobackend

import (
	"bytes"
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
	ShedDepth    int           // > 0: answer 503 at once while more than this many requests wait (default 0: off)
	RetryAfter   int           // seconds sent in Retry-After with a shed 503 (default 0: no header)
	FixedBody    int           // > 0: answer every request 200 with this many bytes, ignoring the other options (default 0: off)
}

// Backend is the demo upstream.
type Backend struct {
	latency      atomic.Int64 // nanos
	slots        chan struct{}
	thrash       float64
	queueTimeout time.Duration
	shedDepth    atomic.Int64
	retryAfter   atomic.Int64
	healthy      atomic.Bool
	fixed        []byte // the fixed-response mode's body; nil: off

	waiting  atomic.Int64
	inflight atomic.Int64
	served   atomic.Int64
	rejected atomic.Int64 // 503 after a queue timeout
	shed     atomic.Int64 // 503 at once past ShedDepth
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
	if o.FixedBody > 0 {
		b.fixed = bytes.Repeat([]byte{'x'}, o.FixedBody-1)
		b.fixed = append(b.fixed, '\n')
	}
	b.latency.Store(int64(o.Latency))
	b.shedDepth.Store(int64(o.ShedDepth))
	b.retryAfter.Store(int64(o.RetryAfter))
	b.healthy.Store(true)
	return b
}

// Stats are the backend's counters.
type Stats struct {
	Served   int64  `json:"served"`
	Rejected int64  `json:"rejected"`
	Shed     int64  `json:"shed"`
	Inflight int64  `json:"inflight"`
	Waiting  int64  `json:"waiting"`
	Latency  string `json:"latency"`
	Healthy  bool   `json:"healthy"`
	// ShedDepth and RetryAfter are the shedding settings (0: off).
	ShedDepth  int64 `json:"shed_depth"`
	RetryAfter int64 `json:"retry_after"`
}

// Stats returns the counters.
func (b *Backend) Stats() Stats {
	return Stats{Served: b.served.Load(), Rejected: b.rejected.Load(), Shed: b.shed.Load(), Inflight: b.inflight.Load(),
		Waiting: b.waiting.Load(), Latency: time.Duration(b.latency.Load()).String(), Healthy: b.healthy.Load(),
		ShedDepth: b.shedDepth.Load(), RetryAfter: b.retryAfter.Load()}
}

// Handler serves every request.
func (b *Backend) Handler(ctx *fasthttp.RequestCtx) {
	if b.fixed != nil {
		// Fixed-response mode: SetBodyRaw keeps the shared slice, no copy.
		b.served.Add(1)
		ctx.SetContentType("text/plain")
		ctx.Response.SetBodyRaw(b.fixed)
		return
	}
	path := string(ctx.Path())
	switch path {
	case "/healthz":
		if !b.healthy.Load() {
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		}
		ctx.SetBodyString("ok\n")
	case "/_backend/stats":
		writeJSON(ctx, b.Stats())
	case "/_backend/config":
		b.configure(ctx)
	case "/ws":
		echoWebSocket(ctx)
	default:
		if b.work(ctx) {
			b.answer(ctx, path)
		}
	}
}

// work runs the capacity model for one request: it waits for a worker (or
// is shed, or times out: then it answers 503 and reports false), then takes
// the service time, slowed past the thrash point.
func (b *Backend) work(ctx *fasthttp.RequestCtx) bool {
	switch b.acquire() {
	case shed:
		b.shed.Add(1)
		if ra := b.retryAfter.Load(); ra > 0 {
			ctx.Response.Header.Set("Retry-After", strconv.FormatInt(ra, 10))
		}
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetBodyString(`{"error":"backend busy"}`)
		return false
	case timedOut:
		b.rejected.Add(1)
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetBodyString(`{"error":"backend overloaded"}`)
		return false
	}
	b.inflight.Add(1)
	d := time.Duration(b.latency.Load())
	if s := ctx.QueryArgs().Peek("sleep"); len(s) > 0 {
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
	return true
}

// answer writes a served request's answer: the status and Cache-Control the
// query asks for, n bytes for /bytes/n, else an echo of the request.
func (b *Backend) answer(ctx *fasthttp.RequestCtx, path string) {
	q := ctx.QueryArgs()
	if c := q.Peek("cache"); len(c) > 0 {
		ctx.Response.Header.Set("Cache-Control", string(c))
	}
	status := fasthttp.StatusOK
	if s := q.Peek("status"); len(s) > 0 {
		if v, err := strconv.Atoi(string(s)); err == nil && v >= 100 && v < 600 {
			status = v
		}
	}
	ctx.SetStatusCode(status)
	if n := bytesPath(path); n >= 0 {
		ctx.SetContentType("application/octet-stream")
		ctx.SetBody(make([]byte, n))
		return
	}
	writeJSON(ctx, map[string]any{
		"method":     string(ctx.Method()),
		"path":       path,
		"query":      string(q.QueryString()),
		"tenant_key": string(ctx.Request.Header.Peek("X-API-Key")),
		"request_id": string(ctx.Request.Header.Peek("X-Request-Id")),
		"body_bytes": len(ctx.PostBody()),
	})
}

// admission is what acquire decided.
type admission int

const (
	admitted admission = iota
	shed               // more than ShedDepth waiting: 503 at once
	timedOut           // waited QueueTimeout: 503
)

// acquire waits for a worker, at most QueueTimeout, or sheds at once when
// more than ShedDepth requests already wait.
func (b *Backend) acquire() admission {
	if b.slots == nil {
		return admitted
	}
	select {
	case b.slots <- struct{}{}:
		return admitted
	default:
	}
	if n := b.waiting.Add(1); b.shedDepth.Load() > 0 && n > b.shedDepth.Load() {
		b.waiting.Add(-1)
		return shed
	}
	defer b.waiting.Add(-1)
	t := time.NewTimer(b.queueTimeout)
	defer t.Stop()
	select {
	case b.slots <- struct{}{}:
		return admitted
	case <-t.C:
		return timedOut
	}
}

func (b *Backend) release() {
	if b.slots != nil {
		<-b.slots
	}
}

// configure changes the latency, shedding or health at run time:
// POST /_backend/config?latency=40ms&shed_depth=10&retry_after=1&healthy=false.
func (b *Backend) configure(ctx *fasthttp.RequestCtx) {
	q := ctx.QueryArgs()
	for _, f := range []struct {
		name string
		v    *atomic.Int64
	}{{"shed_depth", &b.shedDepth}, {"retry_after", &b.retryAfter}} {
		if v := q.Peek(f.name); len(v) > 0 {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil || n < 0 {
				ctx.SetStatusCode(fasthttp.StatusBadRequest)
				ctx.SetBodyString(`{"error":"` + f.name + `: want a whole number >= 0"}`)
				return
			}
			f.v.Store(n)
		}
	}
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
