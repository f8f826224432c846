package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/cost"
	"github.com/sentinel-gateway/sentinel/limit/store"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// usageBackend answers like a model API: what a call cost (its query
// cost=N) in a header (/h), in a JSON answer (/j; /big: one longer than
// the pool reads whole), or in the last event of a streamed answer (/s);
// /login answers 401 unless ?ok=1.
func usageBackend(t *testing.T) string {
	mux := http.NewServeMux()
	n := func(r *http.Request) int { v, _ := strconv.Atoi(r.URL.Query().Get("cost")); return v }
	mux.HandleFunc("/h/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Usage-Total-Tokens", strconv.Itoa(n(r)))
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	mux.HandleFunc("/j/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"usage":{"total_tokens":999}}],"usage":{"total_tokens":%d}}`, n(r))
	})
	mux.HandleFunc("/big/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"text":"%s","usage":{"total_tokens":%d}}`, strings.Repeat("x", upstream.WholeAnswerMax+1000), n(r))
	})
	mux.HandleFunc("/s/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 5 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"w%d \"}}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", n(r))
	})
	mux.HandleFunc("/login/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("ok") != "1" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// costPolicies are a token budget per API key for each way an answer
// tells its cost (resources h, j, big, s), and a failed-login limit.
func costPolicies(t *testing.T, cfg limit.Config) *catalog.PolicySet {
	var ps []catalog.Policy
	for _, a := range []struct {
		res    string
		actual cost.Actual
	}{{"h", cost.Actual{Header: "X-Usage-Total-Tokens"}}, {"j", cost.Actual{JSON: "usage.total_tokens"}},
		{"big", cost.Actual{JSON: "usage.total_tokens"}}, {"s", cost.Actual{SSE: "usage.total_tokens"}}} {
		ps = append(ps, catalog.Policy{Name: "tokens-" + a.res, Match: catalog.PolicyMatch{Resources: []string{a.res}}, Key: []string{"api_key"}, PlanMultiplier: new(bool),
			Limits: []catalog.PolicyLimit{{Limit: 1000, Window: confutil.Duration(time.Minute), Cost: &cost.Cost{
				Estimate: cost.Estimate{Header: "X-Max-Tokens", Default: 100, Max: 400}, Actual: a.actual}}}})
	}
	ps = append(ps, catalog.Policy{Name: "failed-logins", Match: catalog.PolicyMatch{Resources: []string{"login"}}, Key: []string{"ip"},
		Limits: []catalog.PolicyLimit{{Limit: 5, Window: confutil.Duration(time.Minute), CountIf: &cost.CountIf{Status: cost.Statuses{"401", "403"}}}}})
	set, err := catalog.CompilePolicies(ps, cfg.CatalogDefaults())
	require.NoError(t, err)
	return set
}

// costProxy is a proxy with costPolicies over an in-process store.
func costProxy(t *testing.T) (*testProxy, *limit.Limiter) {
	mem := store.NewMemoryStore(store.MemoryOptions{})
	t.Cleanup(mem.Close)
	var cfg limit.Config
	cfg.SetDefaults()
	lim, err := limit.NewLimiter(cfg, mem, limit.Options{Catalog: testTenants(t), Policies: costPolicies(t, cfg)})
	require.NoError(t, err)
	t.Cleanup(lim.Close)
	p := startProxy(t, usageBackend(t), func(d *Deps, _ *upstream.Config) {
		d.Limiter = lim
		d.Config.Routes = nil
		for _, r := range []string{"h", "j", "big", "s", "login"} {
			d.Config.Routes = append(d.Config.Routes, Route{PathPrefix: "/" + r + "/", Upstream: "api", Resource: r})
		}
	})
	return p, lim
}

// remaining is what the token budget of resource res has left for the
// test's API key, looked at without taking anything.
func remaining(lim *limit.Limiter, res string) int64 {
	return lim.Allow(context.Background(), &limit.Request{APIKey: []byte("acme-key"), Tenant: "acme", Plan: "PREMIUM", Resource: res, Peek: true, Cost: 1}).Remaining
}

// TestCostSettledFromTheAnswer: every call reserves its cap (400) and
// costs 100, told by a header, a JSON answer (whole or streamed past) or
// the last event of a stream: the rest comes back after each answer, so
// the key passes until its spend and the next cap reach the limit.
func TestCostSettledFromTheAnswer(t *testing.T) {
	p, lim := costProxy(t)
	for _, res := range []string{"h", "j", "big", "s"} {
		for i := range 7 {
			r, _ := get(t, p.url+"/"+res+"/chat?cost=100", "X-API-Key", "acme-key", "X-Max-Tokens", "400")
			require.Equal(t, http.StatusOK, r.StatusCode, "%s: call %d", res, i)
			want := int64(1000 - 100*(i+1))
			// A streamed answer is settled when the server closes its stream,
			// which may be just after the client has read its end.
			require.Eventually(t, func() bool { return remaining(lim, res) == want }, 5*time.Second, time.Millisecond, "%s: call %d", res, i)
		}
		r, _ := get(t, p.url+"/"+res+"/chat?cost=100", "X-API-Key", "acme-key", "X-Max-Tokens", "400")
		assert.Equal(t, http.StatusTooManyRequests, r.StatusCode, "%s: 700 spent, a cap of 400 does not fit", res)
	}
}

// TestCostOverdraftThroughTheProxy: a call that costs more than its
// estimate takes the rest past the limit; the key is refused after.
func TestCostOverdraftThroughTheProxy(t *testing.T) {
	p, lim := costProxy(t)
	r, _ := get(t, p.url+"/s/chat?cost=1500", "X-API-Key", "acme-key") // estimate: the default, 100
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Eventually(t, func() bool { return remaining(lim, "s") == 0 }, 5*time.Second, time.Millisecond)
	r, _ = get(t, p.url+"/s/chat?cost=1", "X-API-Key", "acme-key", "X-Max-Tokens", "1")
	assert.Equal(t, http.StatusTooManyRequests, r.StatusCode, "1500 spent of 1000")
}

// TestFailedLoginsThroughTheProxy: the sixth failure in a minute is
// refused, and successes never count.
func TestFailedLoginsThroughTheProxy(t *testing.T) {
	p, _ := costProxy(t)
	for i := range 20 {
		r, _ := get(t, p.url+"/login/?ok=1")
		require.Equal(t, http.StatusOK, r.StatusCode, "success %d", i)
	}
	for i := range 5 {
		r, _ := get(t, p.url+"/login/")
		require.Equal(t, http.StatusUnauthorized, r.StatusCode, "failure %d", i)
	}
	r, _ := get(t, p.url+"/login/")
	assert.Equal(t, http.StatusTooManyRequests, r.StatusCode, "the sixth failure")
}

// slotBackend answers /slow/ after holding the request d (query d=50ms),
// streaming /stream/ in two parts d apart, and counts the requests it
// serves at once.
type slotBackend struct {
	url            string
	mu             sync.Mutex
	inFlight, most int
}

func startSlotBackend(t *testing.T) *slotBackend {
	b := &slotBackend{}
	h := func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.inFlight++
		b.most = max(b.most, b.inFlight)
		b.mu.Unlock()
		defer func() { b.mu.Lock(); b.inFlight--; b.mu.Unlock() }()
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		if strings.HasPrefix(r.URL.Path, "/stream/") {
			_, _ = w.Write([]byte("first\n"))
			w.(http.Flusher).Flush()
		}
		time.Sleep(d)
		_, _ = w.Write([]byte("done\n"))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(h)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	b.url = "http://" + ln.Addr().String()
	return b
}

// slotProxy is a proxy whose /slow/ and /stream/ routes (resource
// exports) allow n requests in flight per API key.
func slotProxy(t *testing.T, be string, n int64) *testProxy {
	mem := store.NewMemoryStore(store.MemoryOptions{})
	t.Cleanup(mem.Close)
	var cfg limit.Config
	cfg.SetDefaults()
	cfg.IP = 0
	ps, err := catalog.CompilePolicies([]catalog.Policy{{Name: "exports", Match: catalog.PolicyMatch{Resources: []string{"exports"}},
		Key: []string{"api_key"}, PlanMultiplier: new(bool), Limits: []catalog.PolicyLimit{{Concurrency: n}}}}, cfg.CatalogDefaults())
	require.NoError(t, err)
	lim, err := limit.NewLimiter(cfg, mem, limit.Options{Catalog: testTenants(t), Policies: ps})
	require.NoError(t, err)
	t.Cleanup(lim.Close)
	return startProxy(t, be, func(d *Deps, u *upstream.Config) {
		d.Limiter = lim
		d.Config.Routes = []Route{{PathPrefix: "/slow/", Upstream: "api", Resource: "exports"}, {PathPrefix: "/stream/", Upstream: "api", Resource: "exports"}}
		pc := (*u)["api"]
		pc.Timeout = 30 * time.Second // longer than any test waits: an exchange ended early was ended by the gateway
		(*u)["api"] = pc
	})
}

// TestSlotsBoundRequestsInFlight: 40 clients at once on a key of 3 slots:
// the backend never serves more than 3 of them at a time, the others are
// refused with 429 and Retry-After, and the slots come back with the
// answers.
func TestSlotsBoundRequestsInFlight(t *testing.T) {
	be := startSlotBackend(t)
	p := slotProxy(t, be.url, 3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := get(t, p.url+"/slow/x?d=100ms", "X-API-Key", "acme-key")
			mu.Lock()
			codes[r.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, be.most, 3, "in flight at the backend")
	assert.Positive(t, codes[http.StatusTooManyRequests], "%v", codes)
	assert.Positive(t, codes[http.StatusOK], "%v", codes)
	for i := range 6 { // every slot came back: sequential calls all pass
		r, _ := get(t, p.url+"/slow/x", "X-API-Key", "acme-key")
		assert.Equal(t, http.StatusOK, r.StatusCode, "call %d after", i)
	}
}

// TestSlotHeldUntilTheStreamEnds: a streamed answer holds its slot until
// its last byte; then the slot is free again.
func TestSlotHeldUntilTheStreamEnds(t *testing.T) {
	be := startSlotBackend(t)
	p := slotProxy(t, be.url, 1)
	req, err := http.NewRequest(http.MethodGet, p.url+"/stream/x?d=2s", nil)
	require.NoError(t, err)
	req.Header.Set("X-API-Key", "acme-key")
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "first\n", line, "the stream has begun")
	r, _ := get(t, p.url+"/slow/x", "X-API-Key", "acme-key")
	assert.Equal(t, http.StatusTooManyRequests, r.StatusCode, "the stream holds the one slot (2 s to go)")
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Eventually(t, func() bool {
		r, _ := get(t, p.url+"/slow/x", "X-API-Key", "acme-key")
		return r.StatusCode == http.StatusOK
	}, 5*time.Second, 10*time.Millisecond, "free after its last byte")
}

// TestSlotFreedWhenTheClientLeavesBeforeTheAnswer: a client that leaves
// while the upstream has not answered yet gives its slot back, and the
// gateway ends the upstream exchange (the backend sees its request
// cancelled) instead of leaving the backend working for nobody.
func TestSlotFreedWhenTheClientLeavesBeforeTheAnswer(t *testing.T) {
	started, cancelled := make(chan struct{}, 1), make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/slow/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") == "" {
			return
		}
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(10 * time.Second):
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	p := slotProxy(t, "http://"+ln.Addr().String(), 1)

	c, err := net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
	require.NoError(t, err)
	_, err = c.Write([]byte("GET /slow/x?hold=1 HTTP/1.1\r\nHost: gw\r\nX-API-Key: acme-key\r\n\r\n"))
	require.NoError(t, err)
	<-started
	r, _ := get(t, p.url+"/slow/x", "X-API-Key", "acme-key")
	require.Equal(t, http.StatusTooManyRequests, r.StatusCode, "the held request has the one slot")
	require.NoError(t, c.Close())
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream exchange was not ended (it would have run 10 s, the pool's timeout is 30 s)")
	}
	require.Eventually(t, func() bool {
		r, _ := get(t, p.url+"/slow/x", "X-API-Key", "acme-key")
		return r.StatusCode == http.StatusOK
	}, 5*time.Second, 10*time.Millisecond, "the slot came back")
}
