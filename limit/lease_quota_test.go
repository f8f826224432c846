package limit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestQuotaLeaseEndsAtThePeriodEnd: a quota's lease is dropped at the end
// of the period it was granted in, however long its lifetime, so its
// permits are never used in the next period, which counts only its own
// lease.
func TestQuotaLeaseEndsAtThePeriodEnd(t *testing.T) {
	var mu sync.Mutex
	at := time.Date(2026, 1, 1, 10, 20, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return at
	}
	mem := store.NewMemoryStore(store.MemoryOptions{Now: clock})
	t.Cleanup(mem.Close)
	st := &countingStore{Store: mem}
	l := newTestLimiter(t, testLimitsConfig(nil), st, Options{Now: clock})

	boundary := at.Add(time.Second)
	zone := time.FixedZone("test", int(((-boundary.Unix())%3600+3600)%3600)) // its hour ends at boundary
	s := &spec{params: store.Params{Algorithm: store.Quota, Limit: 1000, Period: store.Hour, Zone: zone}, limit: 1000, most: 1000, ttl: time.Hour}
	s.setKey(store.AppendKeyStrings(s.buf[:0], "", "quota", "k"))
	ctx := context.Background()
	for i := 0; i < 20; i++ { // leases run out at once: they grow
		d, _ := l.one(ctx, s, 1, false, nil, clock().UnixNano())
		require.True(t, d.Allowed, "request %d", i)
	}
	b := l.table.get(s.key(), clock().UnixNano())
	b.mu.Lock()
	require.Positive(t, b.permits, "no lease left over to cross the boundary")
	assert.LessOrEqual(t, b.expires, boundary.UnixNano(), "the lease outlives its period")
	assert.Equal(t, b.expires, b.returnBy(&s.params), "unused permits return until the period's end")
	b.mu.Unlock()

	mu.Lock()
	at = boundary
	mu.Unlock()
	calls := st.calls.Load()
	d, _ := l.one(ctx, s, 1, false, nil, clock().UnixNano())
	require.True(t, d.Allowed)
	assert.Equal(t, calls+1, st.calls.Load(), "a permit of the last period's lease was used in the next one")
	assert.Equal(t, int64(999), d.Remaining, "the new period counts more than its own lease")
}
