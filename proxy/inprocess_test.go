package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// doerFunc is a Doer that answers in process.
type doerFunc func(req *fasthttp.Request, resp *fasthttp.Response) error

func (f doerFunc) DoAt(req *fasthttp.Request, resp *fasthttp.Response, _ time.Time) (time.Time, error) {
	err := f(req, resp)
	return time.Now(), err
}

func newInProcessServer(tb testing.TB) *Server {
	cat := testTenants(tb)
	s, err := New(Deps{
		Config:  provisioned(Config{Routes: []Route{{PathPrefix: "/api", Upstream: "api", Resource: "api"}}}),
		Limiter: inProcessLimiter(tb, cat),
		Tenants: cat,
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

// inProcessLimiter is a limiter on the in-memory store with limits too
// large to refuse: IP, API key and tenant limits and three policies (one
// keyed by a header, one a calendar quota, one by an IP prefix), every
// decision served from local leases after the first.
func inProcessLimiter(tb testing.TB, cat *catalog.Catalog) *limit.Limiter {
	var cfg limit.Config
	cfg.SetDefaults()
	big := int64(1 << 39)
	cfg.IP, cfg.APIKey, cfg.Tenant, cfg.Window, cfg.LeaseTTL, cfg.MaxLease = big, big, big, time.Hour, time.Minute, 1<<19
	hour := confutil.Duration(time.Hour)
	ps, err := catalog.CompilePolicies([]catalog.Policy{
		{Name: "per-user", Match: catalog.PolicyMatch{Methods: []string{"GET"}, Headers: map[string]string{"X-Env": "prod"}},
			Key: []string{"header:X-User-Id"}, Limits: []catalog.PolicyLimit{{Limit: big, Window: hour}}},
		{Name: "tenant-day", Match: catalog.PolicyMatch{Resources: []string{"api"}}, Key: []string{"tenant", "query:id"},
			Limits: []catalog.PolicyLimit{{Limit: big, Period: store.Day}}},
		{Name: "subnet", Key: []string{"ip/24", "method"}, Limits: []catalog.PolicyLimit{{Limit: big, Window: hour}}},
	}, cfg.CatalogDefaults())
	require.NoError(tb, err)
	st := store.NewMemoryStore(store.MemoryOptions{})
	l, err := limit.NewLimiter(cfg, st, limit.Options{Catalog: cat, Policies: ps})
	require.NoError(tb, err)
	tb.Cleanup(func() { l.Close(); st.Close() })
	return l
}

func newCtx() *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.SetRequestURI("/api/items?id=7")
	// A request read from a connection always has its method; one built
	// without it gets a copy of "GET" from every Method call.
	req.Header.SetMethod(fasthttp.MethodGet)
	req.Header.SetHost("gw.example")
	req.Header.Set("X-API-Key", "acme-key")
	req.Header.Set("X-Env", "prod")
	req.Header.Set("X-User-Id", "user-7")
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 4000}, nil)
	return ctx
}
