package limit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestBucketTableFloodKeepsBucketsThatHoldState: a flood of new keys into
// a full table drops only buckets that hold nothing. Buckets with leased
// permits, permits to give back, unreported local admissions or a call in
// flight stay; when nothing can be dropped the new key gets a bucket that
// is not kept, and the table stays within its bound.
func TestBucketTableFloodKeepsBucketsThatHoldState(t *testing.T) {
	const maxKeys = 4 * bucketShards
	tab := newBucketTable(maxKeys)
	now := int64(1)
	held := map[string]*bucket{}
	for i := range maxKeys {
		key := fmt.Sprintf("{ip:held-%d}", i)
		b := tab.get([]byte(key), now)
		switch i % 5 {
		case 0:
			b.permits = 3
		case 1:
			b.expired = 2
		case 2:
			b.alone = &aloneState{unleasedLog: unleasedLog{n: [unleasedSlots]int64{1}}}
		case 3:
			b.fill = &fill{done: make(chan struct{})}
		case 4:
			b.late.Add(1)
		}
		if tab.get([]byte(key), now) == b { // kept: its shard had room
			held[key] = b
		}
	}
	require.Greater(t, len(held), maxKeys/2)
	require.Equal(t, len(held), tab.len())
	unkept := 0
	for i := range 20_000 {
		key := fmt.Sprintf("{ip:flood-%d}", i)
		b := tab.get([]byte(key), now)
		if tab.get([]byte(key), now) != b {
			unkept++
		}
	}
	assert.Positive(t, unkept, "full shards of buckets that hold state keep no new bucket")
	assert.LessOrEqual(t, tab.len(), maxKeys)
	for key, b := range held {
		require.Same(t, b, tab.get([]byte(key), now), "the bucket of %s was dropped", key)
	}

	// Buckets that hold nothing and are not in use make room for new keys.
	for _, b := range held {
		b.permits, b.expired, b.alone, b.fill = 0, 0, nil, nil
		b.late.Store(0)
	}
	later := now
	for i := range 20_000 {
		later += int64(inUse)
		key := []byte(fmt.Sprintf("{ip:again-%d}", i))
		require.Same(t, tab.get(key, later), tab.get(key, later), "a bucket that holds nothing was not dropped for %s", key)
	}
	assert.LessOrEqual(t, tab.len(), maxKeys)
}

// switchStore is a store that fails every call while down is set.
type switchStore struct {
	store.Store
	down atomic.Bool
}

// clockedStore is an in-memory store on a clock the test moves (clock, in
// unix nanos; now reads it), behind a switchStore the test can take down.
func clockedStore(t *testing.T) (clock *atomic.Int64, now func() time.Time, mem *store.MemoryStore, st *switchStore) {
	clock = new(atomic.Int64)
	clock.Store(time.Now().UnixNano())
	now = func() time.Time { return time.Unix(0, clock.Load()) }
	mem = store.NewMemoryStore(store.MemoryOptions{Now: now})
	t.Cleanup(mem.Close)
	return clock, now, mem, &switchStore{Store: mem}
}

func (s *switchStore) Lease(ctx context.Context, req *store.LeaseRequest) (store.LeaseResult, error) {
	if s.down.Load() {
		return store.LeaseResult{}, errors.New("store down")
	}
	return s.Store.Lease(ctx, req)
}

// TestBucketTableFloodKeepsBucketsInUse: a flood of new keys into a full
// table does not drop the bucket of a key in use, even when it holds
// nothing but its last answer: it would come back with a bucket the full
// table cannot keep, whose local admissions no later call reports. Once
// unused for a second, it makes room.
func TestBucketTableFloodKeepsBucketsInUse(t *testing.T) {
	const maxKeys = 2 * bucketShards
	tab := newBucketTable(maxKeys)
	now := int64(time.Hour)
	busy := tab.get([]byte("{ip:busy}"), now)
	for i := range 20_000 {
		now += int64(time.Millisecond / 4)
		tab.get([]byte(fmt.Sprintf("{ip:flood-%d}", i)), now)
		if i%40 == 0 { // the busy key, every 10 ms
			require.Same(t, busy, tab.get([]byte("{ip:busy}"), now), "the bucket of a key in use was dropped after %d new keys", i)
		}
	}
	now += int64(inUse)
	for i := range 20_000 {
		tab.get([]byte(fmt.Sprintf("{ip:later-%d}", i)), now)
	}
	assert.Nil(t, tab.find([]byte("{ip:busy}"), false), "a bucket unused for a second makes room")
}

// TestSweepKeepsUnreportedUnleased: a rule's window can be longer than the time
// after which the sweep drops an idle bucket. The permits the local policy
// let through on such a key while the store failed still count in the
// windows to come after the bucket has gone idle: the sweep keeps the
// bucket until its next store call reports them (or they leave the
// window), or the store, once it answers again, grants the whole window's
// budget on top of them.
func TestSweepKeepsUnreportedUnleased(t *testing.T) {
	const limit, window = 30, time.Minute
	clock, now, _, st := clockedStore(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.Window = time.Second // the sweep drops buckets idle for 10 s
		c.BreakerFailures = 1
	})
	rule := catalog.Rule{Tenant: "free", Resource: "r", Algorithm: store.SlidingWindow, Limit: limit, Window: confutil.Duration(window)}
	l := newTestLimiter(t, cfg, st, Options{Now: now, Catalog: testCatalog(t, rule)})
	req := &Request{Tenant: "free", Plan: "FREE", Resource: "r"}

	st.down.Store(true)
	own, _ := allowN(l, req, limit)
	require.Equal(t, limit, own, "the local share: the whole limit on one pod")
	clock.Add(int64(20 * time.Second)) // idle past the sweep's bound, within the window
	l.sweep()
	st.down.Store(false)
	reported := reportedUnleased.Get()
	got, _ := allowN(l, req, limit)
	assert.Zero(t, got, "the store granted the window's budget on top of %d permits let through alone %v before", own, 20*time.Second)
	assert.Equal(t, uint64(limit), reportedUnleased.Get()-reported, "the permits let through alone were reported")

	// Once they have left the window, an idle bucket goes.
	st.down.Store(true)
	clock.Add(int64(window))
	_, _ = allowN(l, req, 1)
	require.Positive(t, l.table.len())
	clock.Add(int64(window + time.Second))
	l.sweep()
	assert.Zero(t, l.table.len(), "an idle bucket whose unleased permits have left every window to come was kept")
}

// TestCountsUntil: how long the sweep keeps a bucket's unreported local
// permits, per algorithm.
func TestCountsUntil(t *testing.T) {
	now := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC).UnixNano()
	sliding := &spec{params: store.Params{Algorithm: store.SlidingLog, Limit: 5, Window: time.Minute}}
	assert.Equal(t, now+int64(time.Minute), sliding.countsUntil(now))
	bucket := &spec{params: store.Params{Algorithm: store.TokenBucket, Capacity: 10, RefillRate: 2}, window: 5 * time.Second}
	assert.Equal(t, now+int64(5*time.Second), bucket.countsUntil(now), "a token bucket's refill time")
	never := &spec{params: store.Params{Algorithm: store.TokenBucket, Capacity: 10}}
	assert.Equal(t, int64(math.MaxInt64), never.countsUntil(now), "a bucket that never refills")
	quota := &spec{params: store.Params{Algorithm: store.Quota, Limit: 5, Period: store.Day}}
	assert.Equal(t, time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC).UnixNano(), quota.countsUntil(now), "a quota: its period's end")
}

// TestBucketHotFieldsShareALine: what a decision from a lease touches
// (decideLocally: the mutex, permits, expiry, uses, the store's remaining
// and reset, the lease generation) lies in the first 64 bytes, and a bucket
// is a whole number of 64-byte lines, so that its allocation (a size class
// of lines) starts on one. A cached refusal is read from the bucket's rare
// part, whose size class is one line (49 to 64 bytes): of 80 bytes, one
// in four straddled two lines, and the refusal path took 5% longer.
func TestBucketHotFieldsShareALine(t *testing.T) {
	var b bucket
	assert.Zero(t, unsafe.Sizeof(b)%64, "size %d", unsafe.Sizeof(b))
	assert.LessOrEqual(t, unsafe.Sizeof(b), uintptr(192), "a bucket is three lines at most")
	rare := unsafe.Sizeof(bucketRare{})
	assert.True(t, rare > 48 && rare <= 64, "bucketRare is %d bytes", rare)
	for name, f := range map[string][2]uintptr{"mu": {unsafe.Offsetof(b.mu), unsafe.Sizeof(b.mu)},
		"permits": {unsafe.Offsetof(b.permits), 8}, "expires": {unsafe.Offsetof(b.expires), 8}, "uses": {unsafe.Offsetof(b.uses), 8},
		"remaining": {unsafe.Offsetof(b.remaining), 8}, "resetAt": {unsafe.Offsetof(b.resetAt), 8},
		"gen": {unsafe.Offsetof(b.gen), unsafe.Sizeof(b.gen)}} {
		assert.LessOrEqual(t, f[0]+f[1], uintptr(64), name)
	}
}

// TestSpentBudgetRefusedWithoutAStoreCall: the grant that leaves a key no
// budget is remembered as a refusal, as the store's next answer would be:
// a flooded key does not cost a store call for the refusal after every
// permit that frees. Past maxCachedDenial the store is asked again.
func TestSpentBudgetRefusedWithoutAStoreCall(t *testing.T) {
	clock, now, mem, _ := clockedStore(t)
	st := &countingStore{Store: mem}
	cfg := testLimitsConfig(func(c *Config) { c.IP, c.Window = 5, time.Minute })
	l := newTestLimiter(t, cfg, st, Options{Now: now})
	req := &Request{IP: []byte("10.9.9.9")}
	got, _ := allowN(l, req, 5)
	require.Equal(t, 5, got)
	calls := st.calls.Load()
	got, d := allowN(l, req, 50)
	assert.Zero(t, got)
	assert.Equal(t, calls, st.calls.Load(), "a refusal after the grant that spent the budget asked the store")
	assert.Greater(t, d.RetryAfter, 50*time.Second, "the refusal's retry-after is when the first permit leaves")
	clock.Add(int64(maxCachedDenial))
	got, _ = allowN(l, req, 1)
	assert.Zero(t, got)
	assert.Equal(t, calls+1, st.calls.Load(), "past maxCachedDenial the store is asked again")
}

// TestInProcessIdleBucketsGo: with the in-process store, a bucket unused
// for a second goes when it holds nothing but the store's last answer; the
// store keeps the key's count, so the key's next requests are decided as
// before. A bucket that holds a cached refusal stays, and so does a shared
// store's answer.
func TestInProcessIdleBucketsGo(t *testing.T) {
	const limit = 5
	clock, now, mem, st := clockedStore(t)
	cfg := testLimitsConfig(func(c *Config) { c.IP, c.Window = limit, time.Hour })
	l := newTestLimiter(t, cfg, mem, Options{Now: now})
	shared := newTestLimiter(t, cfg, st, Options{Now: now})
	req := func(ip string) *Request { return &Request{IP: []byte(ip)} }

	got, _ := allowN(l, req("10.0.0.1"), 3)
	require.Equal(t, 3, got)
	got, _ = allowN(l, req("10.0.0.2"), limit+1)
	require.Equal(t, limit, got)
	_, _ = allowN(shared, req("10.0.0.3"), 1)
	require.Equal(t, 2, l.table.len())

	clock.Add(int64(inUse / 2))
	l.sweep()
	require.Equal(t, 2, l.table.len(), "a bucket used within the last second went")
	swept := sweptIdle.Get()
	clock.Add(int64(inUse))
	l.sweep()
	shared.sweep()
	assert.Equal(t, 1, l.table.len(), "an idle bucket that holds nothing stayed, or the cached refusal went")
	assert.Equal(t, uint64(1), sweptIdle.Get()-swept)
	assert.Equal(t, 1, shared.table.len(), "a shared store's answer went")
	got, _ = allowN(l, req("10.0.0.2"), 1)
	assert.Zero(t, got, "the cached refusal")

	got, _ = allowN(l, req("10.0.0.1"), limit)
	assert.Equal(t, limit-3, got, "the key's count went with its bucket")
}
