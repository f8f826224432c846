package upstream

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// backend is a real fasthttp server on a loopback port that the tests steer:
// the status it answers, a delay, its health-check status, and a gate that
// holds requests to /block.
type backend struct {
	URL    string
	addr   string
	status atomic.Int32
	health atomic.Int32
	delay  atomic.Int64
	hits   atomic.Int64
	gate   chan struct{}

	mu      sync.Mutex
	ln      net.Listener
	srv     *fasthttp.Server
	lastReq fasthttp.Request // a copy of the last proxied request
}

func startBackend(t testing.TB) *backend {
	t.Helper()
	b := &backend{gate: make(chan struct{})}
	b.status.Store(200)
	b.health.Store(200)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b.addr = ln.Addr().String()
	b.URL = "http://" + b.addr
	b.serve(ln)
	t.Cleanup(b.stop)
	return b
}

func (b *backend) serve(ln net.Listener) {
	srv := &fasthttp.Server{Handler: b.handle, IdleTimeout: time.Second, StreamRequestBody: true}
	b.mu.Lock()
	b.ln, b.srv = ln, srv
	b.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (b *backend) handle(ctx *fasthttp.RequestCtx) {
	if string(ctx.Path()) == "/healthz" {
		ctx.SetStatusCode(int(b.health.Load()))
		return
	}
	b.hits.Add(1)
	if string(ctx.Path()) == "/block" {
		<-b.gate
	}
	if d := time.Duration(b.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	b.mu.Lock()
	ctx.Request.CopyTo(&b.lastReq)
	b.mu.Unlock()
	ctx.SetStatusCode(int(b.status.Load()))
	ctx.Response.Header.Set("X-Backend", b.addr)
	ctx.Response.Header.SetBytesV("X-Uri", ctx.RequestURI())
	if ctx.QueryArgs().Has("close") {
		ctx.SetConnectionClose()
	}
	if n, err := strconv.Atoi(string(ctx.QueryArgs().Peek("size"))); err == nil {
		if ctx.QueryArgs().Has("chunked") {
			ctx.SetBodyStream(bytes.NewReader(make([]byte, n)), -1)
			return
		}
		ctx.SetBody(make([]byte, n))
		return
	}
	ctx.SetBody(ctx.Request.Body()) // echo
}

// stop closes the listener and every connection: the target is down.
func (b *backend) stop() {
	b.mu.Lock()
	srv, ln := b.srv, b.ln
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Shutdown()
		_ = ln.Close() // Shutdown misses a listener that Serve has not taken yet
	}
}

// restart serves again on the same port.
func (b *backend) restart(t testing.TB) {
	t.Helper()
	var ln net.Listener
	require.Eventually(t, func() bool {
		var err error
		ln, err = net.Listen("tcp", b.addr)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	b.serve(ln)
}

func (b *backend) last() (host, uri string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.lastReq.Header.Host()), string(b.lastReq.Header.RequestURI())
}

// closedURL is a loopback URL where nothing listens: connection refused.
func closedURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}

// testPool builds a one-pool Set named after the test, with short timings;
// edit adjusts the pool config first.
func testPool(t testing.TB, edit func(*PoolConfig), targets ...string) (*Set, *Pool) {
	t.Helper()
	pc := PoolConfig{
		Targets:        targets,
		Timeout:        2 * time.Second,
		ConnectTimeout: time.Second,
		Passive:        PassiveConfig{Failures: 1000, EjectFor: time.Minute},
		Breaker:        BreakerConfig{Failures: 1000, OpenFor: time.Minute},
	}
	if edit != nil {
		edit(&pc)
	}
	name := poolName(t)
	s, err := New(provisioned(t, Config{name: pc}))
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	return s, s.Pool(name)
}

// provisioned fills cfg's defaults and validates it, as loading the
// configuration does before New or Stage sees it.
func provisioned(t testing.TB, cfg Config) Config {
	t.Helper()
	cfg.SetDefaults()
	require.NoError(t, cfg.Validate())
	return cfg
}

var poolSeq atomic.Int64

func poolName(t testing.TB) string {
	return "p" + strconv.FormatInt(poolSeq.Add(1), 10)
}

// get sends GET path through p and returns the backend address that answered.
func get(t testing.TB, p *Pool, path string) (string, int, error) {
	t.Helper()
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(path)
	req.Header.SetHost("client.example")
	err := p.Do(req, resp)
	return string(resp.Header.Peek("X-Backend")), resp.StatusCode(), err
}

func (p *Pool) target(url string) *target {
	for _, t := range p.targets {
		if t.url == url {
			return t
		}
	}
	panic("no target " + url)
}
