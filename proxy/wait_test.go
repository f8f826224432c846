package proxy

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// waitProxy is a proxy whose /batch/ route (resource batch) allows limit
// requests a window per API key, a request over it waiting up to maxWait.
func waitProxy(t *testing.T, be string, limit int64, window, maxWait time.Duration) *testProxy {
	mem := store.NewMemoryStore(store.MemoryOptions{})
	t.Cleanup(mem.Close)
	var cfg limitConfig
	cfg.SetDefaults()
	cfg.IP = 0
	ps, err := catalog.CompilePolicies([]catalog.Policy{{Name: "smooth", Match: catalog.PolicyMatch{Resources: []string{"batch"}}, Key: []string{"api_key"},
		PlanMultiplier: new(bool), Limits: []catalog.PolicyLimit{{Limit: limit, Window: confutil.Duration(window), MaxWait: confutil.Duration(maxWait)}}}}, cfg.CatalogDefaults())
	require.NoError(t, err)
	lim := newLimiter(t, cfg, mem, ps)
	return startProxy(t, be, func(d *Deps, _ *upstream.Config) {
		d.Limiter = lim
		d.Config.Routes = []Route{{PathPrefix: "/batch/", Upstream: "api", Resource: "batch"}}
	})
}

type limitConfig = limit.Config

func newLimiter(t *testing.T, cfg limit.Config, st store.Store, ps *catalog.PolicySet) *limit.Limiter {
	lim, err := limit.NewLimiter(cfg, st, limit.Options{Catalog: testTenants(t), Policies: ps})
	require.NoError(t, err)
	t.Cleanup(lim.Close)
	return lim
}

// TestWaitInsteadOf429: twice the limit at once, with max_wait longer than
// a window: every request is answered 200, the second half after the
// first half's permits left the window.
func TestWaitInsteadOf429(t *testing.T) {
	be := startSlotBackend(t)
	const window = 500 * time.Millisecond
	p := waitProxy(t, be.url, 5, window, 3*time.Second)
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := get(t, p.url+"/batch/x", "X-API-Key", "acme-key")
			mu.Lock()
			codes[r.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.Equal(t, map[int]int{http.StatusOK: 10}, codes)
	assert.GreaterOrEqual(t, time.Since(start), window, "the second half waited")
}

// TestWaitBoundedByTheClientsDeadline: a client that says it waits 100 ms
// is refused at once when its permit frees later.
func TestWaitBoundedByTheClientsDeadline(t *testing.T) {
	be := startSlotBackend(t)
	p := waitProxy(t, be.url, 1, time.Minute, 30*time.Second)
	r, _ := get(t, p.url+"/batch/x", "X-API-Key", "acme-key")
	require.Equal(t, http.StatusOK, r.StatusCode)
	start := time.Now()
	r, _ = get(t, p.url+"/batch/x", "X-API-Key", "acme-key", "X-Envoy-Expected-Rq-Timeout-Ms", "100")
	assert.Equal(t, http.StatusTooManyRequests, r.StatusCode)
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	assert.Less(t, time.Since(start), 5*time.Second, "refused at once, not after max_wait")
}
