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
	"github.com/sentinel-gateway/sentinel/limit/cost"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// exportsPolicy is the documentation's slot limit: n exports in flight per
// tenant.
func exportsPolicy(n int64) catalog.Policy {
	return catalog.Policy{Name: "exports", Match: catalog.PolicyMatch{Resources: []string{"exports"}}, Key: []string{"tenant"},
		PlanMultiplier: new(bool), Limits: []catalog.PolicyLimit{{Concurrency: n}}}
}

// TestSlotsHoldAsManyAsTheLimit: n requests hold the key's n slots; the
// next is refused until one gives its slot back, which the next request
// takes without a store call.
func TestSlotsHoldAsManyAsTheLimit(t *testing.T) {
	l, _ := costLimiter(t, exportsPolicy(3))
	req := &Request{Tenant: "acme", Plan: "PREMIUM", Resource: "exports"}
	var held []Decision
	for i := range 3 {
		d := l.Allow(context.Background(), req)
		require.True(t, d.Allowed, "slot %d", i)
		require.Equal(t, 1, d.NReserved)
		held = append(held, d)
	}
	d := l.Allow(context.Background(), req)
	assert.False(t, d.Allowed, "the fourth in flight")
	assert.Equal(t, 0, d.NReserved)
	assert.Positive(t, d.RetryAfter)
	l.Settle(&held[0].Reserved[0], 0)
	d = l.Allow(context.Background(), req)
	require.True(t, d.Allowed, "a slot came back")
	assert.True(t, l.Allow(context.Background(), &Request{Tenant: "free", Plan: "FREE", Resource: "exports"}).Allowed, "another tenant")
}

// TestSlotReusedWithoutAStoreCall: a key whose slots are not all held
// takes the slot its last request gave back from the pod, without a store
// call, while its requests follow each other.
func TestSlotReusedWithoutAStoreCall(t *testing.T) {
	l, _ := costLimiter(t, exportsPolicy(3))
	req := &Request{Tenant: "acme", Resource: "exports"}
	d := l.Allow(context.Background(), req)
	require.True(t, d.Allowed)
	local := slotLocalTakes.Get()
	for range 100 {
		l.Settle(&d.Reserved[0], 0)
		d = l.Allow(context.Background(), req)
		require.True(t, d.Allowed)
	}
	// The test's clock stands still: the slot is never idle long enough
	// to go back to the store.
	assert.Equal(t, local+100, slotLocalTakes.Get())
}

// TestSlotsAcrossLimiters: two limiters on one store (two pods) never hold
// more than the limit together, whatever the interleaving.
func TestSlotsAcrossLimiters(t *testing.T) {
	mem := store.NewMemoryStore(store.MemoryOptions{})
	t.Cleanup(mem.Close)
	cfg := testLimitsConfig(nil)
	var pods [2]*Limiter
	for i := range pods {
		pods[i] = newTestLimiter(t, cfg, mem, Options{Catalog: testCatalog(t), Policies: withPolicies(t, cfg, exportsPolicy(4))})
	}
	var mu sync.Mutex
	inFlight, most := 0, 0
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := pods[g%2]
			for range 200 {
				d := l.Allow(context.Background(), &Request{Tenant: "acme", Resource: "exports"})
				if !d.Allowed {
					continue
				}
				mu.Lock()
				inFlight++
				most = max(most, inFlight)
				mu.Unlock()
				time.Sleep(time.Microsecond)
				mu.Lock()
				inFlight--
				mu.Unlock()
				l.Settle(&d.Reserved[0], 0)
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, most, 4)
	// Once the pods have given their idle slots back (20 ms after their
	// last use), every slot can be taken, from either pod, and no more.
	require.Eventually(t, func() bool { return idleSlots(pods[0])+idleSlots(pods[1]) == 0 }, 5*time.Second, time.Millisecond)
	var held []Decision
	for i := range 4 {
		d := pods[i%2].Allow(context.Background(), &Request{Tenant: "acme", Resource: "exports"})
		require.True(t, d.Allowed, "slot %d", i)
		held = append(held, d)
	}
	for _, l := range pods {
		assert.False(t, l.Allow(context.Background(), &Request{Tenant: "acme", Resource: "exports"}).Allowed)
	}
	for i := range held {
		pods[i%2].Settle(&held[i].Reserved[0], 0)
	}
}

// TestSlotGivenBackWhenALaterLimitRefuses: a request that a later limit
// refuses does not keep the slot it took.
func TestSlotGivenBackWhenALaterLimitRefuses(t *testing.T) {
	p := exportsPolicy(1)
	p.Limits = append(p.Limits, catalog.PolicyLimit{Limit: 1, Window: 60e9})
	l, _ := costLimiter(t, p)
	req := &Request{Tenant: "acme", Resource: "exports"}
	d := l.Allow(context.Background(), req)
	require.True(t, d.Allowed)
	l.Settle(&d.Reserved[0], 0)
	assert.False(t, l.Allow(context.Background(), req).Allowed, "the window's one request is spent")
	v := l.Allow(context.Background(), &Request{Tenant: "acme", Resource: "exports", Peek: true})
	assert.Equal(t, int64(0), v.Remaining, "the window's remaining")
	assert.Equal(t, int64(1), v.Applied[0].Remaining, "the slot is free")
}

// TestSlotPastTheReservationsIsNotLeaked: a request that more metered
// limits apply to than a decision holds gives the slots past them back at
// once rather than hold them for ever.
func TestSlotPastTheReservationsIsNotLeaked(t *testing.T) {
	p := exportsPolicy(1)
	p.Limits = nil
	for w := 1; w <= MaxReserved; w++ {
		p.Limits = append(p.Limits, catalog.PolicyLimit{Limit: 100, Window: confutil.Duration(time.Duration(w) * time.Second),
			CountIf: &cost.CountIf{Status: cost.Statuses{"401"}}})
	}
	p.Limits = append(p.Limits, catalog.PolicyLimit{Concurrency: 1})
	l, _ := costLimiter(t, p)
	req := &Request{Tenant: "acme", Resource: "exports"}
	unkept := unkeptReservations.Get()
	d := l.Allow(context.Background(), req)
	require.True(t, d.Allowed)
	assert.Equal(t, MaxReserved, d.NReserved)
	assert.Equal(t, unkept+1, unkeptReservations.Get())
	assert.True(t, l.Allow(context.Background(), req).Allowed, "the fifth limit's slot was given back")
}

// idleSlots are the slots l holds unused, and its slot calls in flight.
func idleSlots(l *Limiter) int64 {
	var n int64
	l.table.each(func(b *bucket) {
		b.mu.Lock()
		if b.rare != nil && b.rare.slots != nil {
			// A slot given back is out of idle before the store call
			// that gives it returns: count the call until it has.
			n += b.rare.slots.idle + int64(b.rare.slots.calls)
		}
		b.mu.Unlock()
	})
	return n
}

// TestSlotLeaseRenewedWhileHeld: a slot held longer than the store's lease
// (a long export) stays the pod's: its renewals keep the lease, so another
// pod never gets it meanwhile; given back, it is the other pod's.
func TestSlotLeaseRenewedWhileHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("holds a slot past its lease's 5 s")
	}
	mem := store.NewMemoryStore(store.MemoryOptions{})
	t.Cleanup(mem.Close)
	cfg := testLimitsConfig(nil)
	var pods [2]*Limiter
	for i := range pods {
		pods[i] = newTestLimiter(t, cfg, mem, Options{Catalog: testCatalog(t), Policies: withPolicies(t, cfg, exportsPolicy(1))})
	}
	req := &Request{Tenant: "acme", Resource: "exports"}
	d := pods[0].Allow(context.Background(), req)
	require.True(t, d.Allowed)
	end := time.Now().Add(SlotLeaseTTL + 1500*time.Millisecond)
	for time.Now().Before(end) {
		require.False(t, pods[1].Allow(context.Background(), req).Allowed, "pod 0 still holds the slot")
		time.Sleep(100 * time.Millisecond)
	}
	pods[0].Settle(&d.Reserved[0], 0)
	require.Eventually(t, func() bool { return pods[1].Allow(context.Background(), req).Allowed }, 5*time.Second, 10*time.Millisecond)
}
