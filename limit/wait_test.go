package limit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
)

// smoothPolicy is the documentation's: limit a window per API key, a
// request over it waiting up to maxWait.
func smoothPolicy(limit int64, window, maxWait time.Duration) catalog.Policy {
	return catalog.Policy{Name: "smooth", Match: catalog.PolicyMatch{Resources: []string{"batch"}}, Key: []string{"api_key"}, PlanMultiplier: new(bool),
		Limits: []catalog.PolicyLimit{{Limit: limit, Window: confutil.Duration(window), MaxWait: confutil.Duration(maxWait)}}}
}

// waitLimiter is a limiter on the wall clock (waits sleep on timers).
func waitLimiter(t *testing.T, mod func(*Config), policies ...catalog.Policy) *Limiter {
	cfg := testLimitsConfig(mod)
	return newTestLimiter(t, cfg, memStore(t), Options{Catalog: testCatalog(t), Policies: withPolicies(t, cfg, policies...)})
}

// decideOrWait decides req and waits when its limit lets it, as the proxy
// does; it returns whether it was admitted and when.
func decideOrWait(l *Limiter, req *Request) (bool, time.Time) {
	var d Decision
	r := *req
	r.Arrived = time.Now() // as the proxy passes its arrival time
	l.Decide(context.Background(), &r, &d)
	if !d.Allowed && d.MaxWait > 0 {
		l.Wait(context.Background(), &r, &d, time.Now().Add(d.MaxWait))
	}
	return d.Allowed, time.Now()
}

// TestWaitAdmitsAtTheRate: twice the limit at once, max_wait a window and
// more: every request is admitted, the second half only once the first
// half's permits have left the window (the store's count keeps every
// window to the limit, waiting or not).
func TestWaitAdmitsAtTheRate(t *testing.T) {
	const limit, window = 5, 400 * time.Millisecond
	l := waitLimiter(t, nil, smoothPolicy(limit, window, 2*time.Second))
	start := time.Now()
	var mu sync.Mutex
	var last time.Time
	var wg sync.WaitGroup
	for range 2 * limit {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, when := decideOrWait(l, &Request{APIKey: []byte("k1"), Resource: "batch"})
			assert.True(t, ok)
			mu.Lock()
			last = maxTime(last, when)
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.GreaterOrEqual(t, last.Sub(start), window, "the second half waited for the first's permits to leave")
	assert.Zero(t, l.waits.total.Load(), "nobody left waiting")
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestWaitRefusedAtOnceWhenItCannotSucceed: a wait past max_wait, or a full
// queue, is refused at once.
func TestWaitRefusedAtOnceWhenItCannotSucceed(t *testing.T) {
	l := waitLimiter(t, func(c *Config) { c.WaitQueuePerKey = 2 }, smoothPolicy(1, time.Minute, time.Second))
	req := &Request{APIKey: []byte("k1"), Resource: "batch"}
	ok, _ := decideOrWait(l, req)
	require.True(t, ok)
	start := time.Now()
	ok, _ = decideOrWait(l, req)
	assert.False(t, ok, "the permit frees in a minute: max_wait is a second")
	assert.Less(t, time.Since(start), 500*time.Millisecond, "refused at once")

	// A permit in 50 s, waits of up to a minute, and the key's queue
	// holding its two waiters (taken here: real ones may wake to decide
	// again and leave it for a moment on a busy machine).
	l2 := waitLimiter(t, func(c *Config) { c.WaitQueuePerKey = 2 }, smoothPolicy(1, 50*time.Second, time.Minute))
	ok, _ = decideOrWait(l2, req)
	require.True(t, ok)
	var d Decision
	l2.Decide(context.Background(), req, &d)
	require.False(t, d.Allowed)
	for range 2 {
		q, wt := l2.waits.join(d.waitOn, 0, false)
		require.NotNil(t, q)
		defer l2.waits.leave(d.waitOn, q, wt)
	}
	// Refused at once, not after a wait: a wait would last the 40 s of its
	// context (the permit frees in 50).
	full, cancelFull := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancelFull()
	start = time.Now()
	assert.False(t, l2.Wait(full, req, &d, time.Now().Add(time.Minute)), "the key's queue is full")
	assert.Less(t, time.Since(start), 30*time.Second, "refused without waiting")
}

// TestWaitServesPremiumFirst: waiters of several plans are admitted
// PREMIUM first, then in the order they came within a plan.
func TestWaitServesPremiumFirst(t *testing.T) {
	const window = 500 * time.Millisecond
	l := waitLimiter(t, nil, smoothPolicy(1, window, 5*time.Second))
	ok, _ := decideOrWait(l, &Request{APIKey: []byte("k1"), Resource: "batch"})
	require.True(t, ok)
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	join := func(name, plan string, waiting int64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, _ := decideOrWait(l, &Request{APIKey: []byte("k1"), Resource: "batch", Tenant: "t", Plan: plan})
			assert.True(t, ok, name)
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}()
		require.Eventually(t, func() bool { return l.waits.total.Load() == waiting }, 5*time.Second, time.Millisecond)
	}
	join("free-1", "FREE", 1)
	join("free-2", "FREE", 2)
	join("premium", "PREMIUM", 3)
	wg.Wait()
	assert.Equal(t, []string{"premium", "free-1", "free-2"}, order)
}
