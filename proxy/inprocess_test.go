package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
)

// doerFunc is a Doer that answers in process.
type doerFunc func(req *fasthttp.Request, resp *fasthttp.Response) error

func (f doerFunc) DoAt(req *fasthttp.Request, resp *fasthttp.Response, _ time.Time) (time.Time, error) {
	err := f(req, resp)
	return time.Now(), err
}

func newInProcessServer(tb testing.TB) *Server {
	lim := &fakeLimiter{allow: func(*limit.Request) limit.Decision {
		return limit.Decision{Allowed: true, Scope: limit.ScopeTenant, Limit: 100, Remaining: 50}
	}}
	s, err := New(Deps{
		Config:  Config{Routes: []Route{{PathPrefix: "/api", Upstream: "api", Resource: "api"}}},
		Limiter: lim,
		Tenants: testTenants(tb),
		Pools: func(string) Doer {
			return doerFunc(func(_ *fasthttp.Request, resp *fasthttp.Response) error {
				resp.SetStatusCode(200)
				resp.SetBodyString("ok")
				return nil
			})
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func newCtx() *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.SetRequestURI("/api/items?id=7")
	req.Header.SetHost("gw.example")
	req.Header.Set("X-API-Key", "acme-key")
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 4000}, nil)
	return ctx
}
