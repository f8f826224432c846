package limit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/cost"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// tokensPolicy is the documentation's token budget: limit tokens a
// minute per API key, estimated from X-Max-Tokens (default 100, at most
// 400), settled from the answer.
func tokensPolicy(limit int64) catalog.Policy {
	return catalog.Policy{
		Name:  "tokens",
		Match: catalog.PolicyMatch{Resources: []string{"chat"}},
		Key:   []string{"api_key"},
		Limits: []catalog.PolicyLimit{{Limit: limit, Window: confutil.Duration(time.Minute), Cost: &cost.Cost{
			Estimate: cost.Estimate{Header: "X-Max-Tokens", Default: 100, Max: 400},
			Actual:   cost.Actual{Header: "X-Usage-Total-Tokens"},
		}}},
		PlanMultiplier: new(bool),
	}
}

// failedLoginsPolicy counts 401 and 403 answers per IP: limit a minute.
func failedLoginsPolicy(limit int64) catalog.Policy {
	return catalog.Policy{
		Name:   "failed-logins",
		Match:  catalog.PolicyMatch{Resources: []string{"login"}},
		Key:    []string{"ip"},
		Limits: []catalog.PolicyLimit{{Limit: limit, Window: confutil.Duration(time.Minute), CountIf: &cost.CountIf{Status: cost.Statuses{"401", "403"}}}},
	}
}

// costLimiter is a limiter over an in-process store whose clock the test
// moves, with policies.
func costLimiter(t *testing.T, policies ...catalog.Policy) (*Limiter, *testClock) {
	clock := &testClock{at: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)}
	mem := store.NewMemoryStore(store.MemoryOptions{Now: clock.now})
	t.Cleanup(mem.Close)
	cfg := testLimitsConfig(nil)
	return newTestLimiter(t, cfg, mem, Options{Catalog: testCatalog(t), Policies: withPolicies(t, cfg, policies...), Now: clock.now}), clock
}

// TestCostRefundedWhenTheAnswerCostsLess: each call reserves its cap
// (400) and costs 100: what it did not cost comes back, so the key is
// refused only when its spend plus the next cap passes the limit.
func TestCostRefundedWhenTheAnswerCostsLess(t *testing.T) {
	l, _ := costLimiter(t, tokensPolicy(1000))
	req := &Request{APIKey: []byte("k9"), Resource: "chat", Attrs: headers{"X-Max-Tokens": "400"}}
	spent := int64(0)
	for i := range 7 { // 600 spent + 400 reserved fit; the eighth does not
		d := l.Allow(context.Background(), req)
		require.True(t, d.Allowed, "call %d, %d spent", i, spent)
		require.Equal(t, 1, d.NReserved)
		assert.Equal(t, int64(400), d.Reserved[0].N, "the estimate, capped")
		l.Settle(&d.Reserved[0], 100)
		spent += 100
	}
	assert.False(t, l.Allow(context.Background(), req).Allowed, "700 spent: a cap of 400 does not fit")
	small := &Request{APIKey: []byte("k9"), Resource: "chat", Attrs: headers{"X-Max-Tokens": "300"}}
	d := l.Allow(context.Background(), small)
	require.True(t, d.Allowed, "a cap of 300 does")
	l.Settle(&d.Reserved[0], 300)
	assert.False(t, l.Allow(context.Background(), &Request{APIKey: []byte("k9"), Resource: "chat", Attrs: headers{"X-Max-Tokens": "1"}}).Allowed, "1000 spent")
}

// TestCostOverdraftRepaidByWaiting: an answer that costs more than its
// estimate takes the difference past the limit; the key is refused until
// the window has repaid it, never forgiven.
func TestCostOverdraftRepaidByWaiting(t *testing.T) {
	l, clock := costLimiter(t, tokensPolicy(1000))
	req := &Request{APIKey: []byte("k9"), Resource: "chat"} // no header: the default, 100
	for range 2 {
		d := l.Allow(context.Background(), req)
		require.True(t, d.Allowed)
		assert.Equal(t, int64(100), d.Reserved[0].N)
		l.Settle(&d.Reserved[0], 700) // 600 over the estimate
	}
	for range 3 {
		clock.add(15 * time.Second)
		assert.False(t, l.Allow(context.Background(), req).Allowed, "1400 spent of 1000 within the window")
	}
	clock.add(17 * time.Second) // the store counts by sub-windows of 1.5 s
	assert.True(t, l.Allow(context.Background(), req).Allowed, "repaid a window later")
}

// TestCountIfCountsOnlyItsStatuses: a failed-login limit refuses after
// its third failure, and never a client that only succeeds.
func TestCountIfCountsOnlyItsStatuses(t *testing.T) {
	l, _ := costLimiter(t, failedLoginsPolicy(3))
	req := &Request{IP: []byte("192.0.2.7"), Resource: "login"}
	settle := func(status int) bool {
		d := l.Allow(context.Background(), req)
		if !d.Allowed {
			return false
		}
		require.Equal(t, 1, d.NReserved)
		r := &d.Reserved[0]
		actual := int64(0)
		if r.Meter.Counts(status) {
			actual = r.N
		}
		l.Settle(r, actual)
		return true
	}
	for i := range 50 {
		require.True(t, settle(200), "success %d", i)
	}
	for i := range 3 {
		require.True(t, settle(401), "failure %d", i)
	}
	assert.False(t, settle(200), "three failures in the minute: refused")
	other := &Request{IP: []byte("192.0.2.8"), Resource: "login"}
	assert.True(t, l.Allow(context.Background(), other).Allowed, "another IP")
}

// TestCostRefundAfterTheLeaseEnded: a refund that comes after the lease
// its permits came from ended returns to the store where it counted them.
func TestCostRefundAfterTheLeaseEnded(t *testing.T) {
	l, clock := costLimiter(t, tokensPolicy(1000))
	big := &Request{APIKey: []byte("k9"), Resource: "chat", Attrs: headers{"X-Max-Tokens": "400"}}
	held := l.Allow(context.Background(), big)
	require.True(t, held.Allowed)
	for range 3 { // leases come and go meanwhile
		clock.add(3 * time.Second)
		d := l.Allow(context.Background(), big)
		require.True(t, d.Allowed)
		l.Settle(&d.Reserved[0], 10)
	}
	l.Settle(&held.Reserved[0], 10)
	// 40 spent: 960 remain, two caps fit.
	for i := range 2 {
		d := l.Allow(context.Background(), big)
		require.True(t, d.Allowed, "call %d", i)
		l.Settle(&d.Reserved[0], 400)
	}
	assert.False(t, l.Allow(context.Background(), big).Allowed, "840 spent")
}
