package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/store"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// BenchmarkIdentifyRoute is identity and routing of one request.
func BenchmarkIdentifyRoute(b *testing.B) {
	s := newInProcessServer(b)
	ctx := newCtx()
	x := new(exchange)
	b.ReportAllocs()
	for b.Loop() {
		x.route = s.table.Load().match(ctx.Host(), ctx.Path())
		s.setRequestID(x, s.identify(ctx, x), false)
	}
}

// BenchmarkHandler is the whole request path with an in-process upstream.
func BenchmarkHandler(b *testing.B) {
	s := newInProcessServer(b)
	ctx := newCtx()
	var req fasthttp.Request
	ctx.Request.CopyTo(&req)
	b.ReportAllocs()
	for b.Loop() {
		req.CopyTo(&ctx.Request)
		ctx.Response.Reset()
		s.handle(ctx)
	}
}

// fastBackend is a minimal fasthttp upstream on loopback.
func fastBackend(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{"ok":true}`) }}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String()
}

func loadClient(addr string, b *testing.B) {
	c := &fasthttp.HostClient{Addr: addr, MaxConns: 64}
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + addr + "/api/items")
		req.Header.Set("X-API-Key", "acme-key")
		for pb.Next() {
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("%v %d", err, resp.StatusCode())
				return
			}
		}
	})
}

// BenchmarkDirect is the load client against the upstream alone.
func BenchmarkDirect(b *testing.B) {
	loadClient(fastBackend(b), b)
}

// BenchmarkProxy is the same load through the gateway, without limits
// (noop limiter), and BenchmarkProxyLimited with the real limiter on the
// in-memory store (tenant and IP limits served from local leases).
func BenchmarkProxy(b *testing.B) { benchProxy(b, nil) }

func BenchmarkProxyLimited(b *testing.B) {
	mem := store.NewMemoryStore(store.MemoryOptions{})
	b.Cleanup(mem.Close)
	var cfg limit.Config
	cfg.SetDefaults()
	cfg.Tenant, cfg.IP, cfg.Window = 1<<39, 1<<39, time.Hour
	lim, err := limit.NewLimiter(cfg, mem, limit.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(lim.Close)
	benchProxy(b, lim)
}

func benchProxy(b *testing.B, lim Limiter) {
	target := fastBackend(b)
	ucfg := upstream.Config{"api": {Targets: []string{"http://" + target}}}
	ucfg.SetDefaults()
	set, err := upstream.New(ucfg)
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Deps{
		Config:    provisioned(Config{Routes: []Route{{PathPrefix: "/", Upstream: "api", Resource: "api"}}}),
		Limiter:   lim,
		Tenants:   testTenants(b),
		Upstreams: set,
	})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	b.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	loadClient(ln.Addr().String(), b)
}
