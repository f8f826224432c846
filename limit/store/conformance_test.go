package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// The conformance suite: one table of behaviours that every Store must show,
// run against the MemoryStore (with an injected clock), a RedisStore on a
// real redis-server and a RedisStore on a real 3-master Redis Cluster.

// confEnv is one store under test.
type confEnv struct {
	name   string
	store  Store
	clock  *confClock     // memory only: time moves when the test says so
	client rueidis.Client // Redis only
}

// sleep lets d pass: the injected clock moves, or the test waits for Redis'
// clock.
func (e *confEnv) sleep(d time.Duration) {
	if e.clock != nil {
		e.clock.Advance(d)
		return
	}
	time.Sleep(d)
}

// now is the time a grant is recorded at: the injected clock, or the wall
// clock before the call (Redis decides at or after it).
func (e *confEnv) now() time.Time {
	if e.clock != nil {
		return e.clock.Now()
	}
	return time.Now()
}

// confClock is a clock that moves only when told.
type confClock struct {
	mu sync.Mutex
	t  time.Time
}

func newConfClock() *confClock {
	return &confClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *confClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *confClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type confCase struct {
	name string
	run  func(t *testing.T, e *confEnv, key string)
}

var confCases = []confCase{
	{"SlidingWindowAllowDeny", confAllowDeny(SlidingWindow)},
	{"SlidingLogAllowDeny", confAllowDeny(SlidingLog)},
	{"TokenBucketAllowDeny", confAllowDeny(TokenBucket)},
	{"SlidingWindowPartial", confPartial(SlidingWindow)},
	{"SlidingLogPartial", confPartial(SlidingLog)},
	{"TokenBucketPartial", confPartial(TokenBucket)},
	{"SlidingWindowFreesAfterRetry", confFreesAfterRetry(SlidingWindow)},
	{"SlidingLogFreesAfterRetry", confFreesAfterRetry(SlidingLog)},
	{"TokenBucketRefill", confTokenBucketRefill},
	{"TokenBucketZeroRefill", confTokenBucketZeroRefill},
	{"SlidingWindowLeaseCountsUntilExpiryPlusWindow", confLeaseCounted(SlidingWindow)},
	{"SlidingLogLeaseCountsUntilExpiryPlusWindow", confLeaseCounted(SlidingLog)},
	{"SlidingWindowHeldAtTheLimit", confHeldAtLimit(SlidingWindow)},
	{"SlidingLogHeldAtTheLimit", confHeldAtLimit(SlidingLog)},
	{"SlidingWindowUsedLeaseRedated", confRedate(SlidingWindow)},
	{"SlidingLogUsedLeaseRedated", confRedate(SlidingLog)},
	{"SlidingWindowUnleased", confUnleased(SlidingWindow)},
	{"SlidingLogUnleased", confUnleased(SlidingLog)},
	{"TokenBucketUnleased", confUnleased(TokenBucket)},
	{"SlidingWindowUnleasedParts", confUnleasedParts(SlidingWindow)},
	{"SlidingLogUnleasedParts", confUnleasedParts(SlidingLog)},
	{"TokenBucketUnleasedParts", confUnleasedParts(TokenBucket)},
	{"SlidingWindowBoundaryBurst", confBoundaryBurst(SlidingWindow)},
	{"SlidingLogBoundaryBurst", confBoundaryBurst(SlidingLog)},
	{"SlidingLogDuplicateRequestID", confDuplicateID},
	{"SlidingLogRequestIDAllowance", confIDAllowance},
	{"SlidingLogRequestIDWindow", confIDWindow},
	{"SlidingLogRequestIDNoRetries", confIDNoRetries},
	{"SlidingWindowIgnoresRequestID", confIgnoresID},
	{"ZeroLimit", confZeroLimit},
	{"AlgorithmChange", confAlgorithmChange},
	{"Concurrent", confConcurrent},
	{"InvalidRequests", confInvalid},
	{"SlidingWindowAllOrNothing", confAllOrNothing(SlidingWindow)},
	{"SlidingLogAllOrNothing", confAllOrNothing(SlidingLog)},
	{"TokenBucketAllOrNothing", confAllOrNothing(TokenBucket)},
	{"SlidingWindowReturn", confReturn(SlidingWindow)},
	{"SlidingLogReturn", confReturn(SlidingLog)},
	{"TokenBucketReturn", confReturn(TokenBucket)},
	{"SlidingWindowFirstFree", confFirstFree(SlidingWindow)},
	{"SlidingLogFirstFree", confFirstFree(SlidingLog)},
	{"TokenBucketFirstFree", confFirstFree(TokenBucket)},
	{"SlidingWindowLook", confLook(SlidingWindow)},
	{"SlidingLogLook", confLook(SlidingLog)},
	{"TokenBucketLook", confLook(TokenBucket)},
	{"QuotaLook", confLook(Quota)},
	{"SlidingWindowReset", confReset(SlidingWindow)},
	{"SlidingLogReset", confReset(SlidingLog)},
	{"TokenBucketReset", confReset(TokenBucket)},
	{"QuotaReset", confReset(Quota)},
	{"SlidingWindowReportAlone", confReportAlone(SlidingWindow)},
	{"SlidingLogReportAlone", confReportAlone(SlidingLog)},
	{"TokenBucketReportAlone", confReportAlone(TokenBucket)},
	{"QuotaReportAlone", confReportAlone(Quota)},
	{"EdgeValues", confEdgeValues},
	{"OutOfBounds", confOutOfBounds},
}

func TestConformanceMemory(t *testing.T) {
	for _, tc := range confCases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newConfClock()
			s := NewMemoryStore(MemoryOptions{Now: clock.Now})
			t.Cleanup(s.Close)
			tc.run(t, &confEnv{name: "memory", store: s, clock: clock}, "{conf:"+tc.name+"}")
		})
	}
}

func TestConformanceRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := confClient(t, []string{srv.Addr})
	e := &confEnv{name: "redis", store: NewRedisStore(client, RedisStoreOptions{KeyPrefix: "test"}), client: client}
	confRunRedis(t, e)
}

func TestConformanceRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	client := confClient(t, c.Addrs)
	_, isCluster := client.Nodes()[c.Addrs[2]]
	require.True(t, isCluster, "the client does not see the cluster's nodes: %v", client.Nodes())
	e := &confEnv{name: "cluster", store: NewRedisStore(client, RedisStoreOptions{KeyPrefix: "test"}), client: client}
	confRunRedis(t, e)
	t.Run("SlotRouting", func(t *testing.T) { confSlotRouting(t, e, c) })
}

func confRunRedis(t *testing.T, e *confEnv) {
	for _, tc := range confCases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, e, "{conf:"+e.name+":"+tc.name+"}")
		})
	}
	t.Run("EveryKeyHasTTL", func(t *testing.T) { confEveryKeyHasTTL(t, e) })
}

func confClient(t testing.TB, addrs []string) rueidis.Client {
	t.Helper()
	client, err := NewRedisClient(RedisConfig{Addrs: addrs})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return client
}

// lease asks for want permits of key and fails the test on an error. A
// request ID gets the default allowance (2 retries within 10s).
func (e *confEnv) lease(t *testing.T, key string, p Params, want int64, ttl time.Duration, rid string) LeaseResult {
	t.Helper()
	req := &LeaseRequest{Key: []byte(key), Params: p, Want: want, LeaseTTL: ttl}
	if rid != "" {
		req.RequestID = []byte(rid)
		req.RequestIDRetries, req.RequestIDWindow = 2, 10*time.Second
	}
	return e.leaseReq(t, req)
}

// leaseReq sends req and fails the test on an error.
func (e *confEnv) leaseReq(t *testing.T, req *LeaseRequest) LeaseResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := e.store.Lease(ctx, req)
	require.NoError(t, err)
	return res
}

func confParams(alg Algorithm, limit int64, window time.Duration) Params {
	if alg == TokenBucket {
		// A bucket that refills slowly enough to look like a window's limit
		// for the length of a test step.
		return Params{Algorithm: TokenBucket, Capacity: limit, RefillRate: float64(limit) / window.Seconds()}
	}
	return Params{Algorithm: alg, Limit: limit, Window: window}
}

func confAllowDeny(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		p := confParams(alg, 3, time.Minute)
		for i := int64(1); i <= 3; i++ {
			r := e.lease(t, key, p, 1, 0, "")
			require.Equal(t, int64(1), r.Granted, "request %d", i)
			assert.Equal(t, 3-i, r.Remaining, "request %d", i)
			assert.Equal(t, time.Duration(0), r.RetryAfter, "request %d", i)
			assert.Positive(t, r.Reset, "request %d", i)
		}
		r := e.lease(t, key, p, 1, 0, "")
		assert.Equal(t, int64(0), r.Granted)
		assert.Equal(t, int64(0), r.Remaining)
		assert.False(t, r.Duplicate)
		assert.Positive(t, r.RetryAfter)
		assert.LessOrEqual(t, r.RetryAfter, time.Minute+time.Minute/20+time.Millisecond)
		assert.LessOrEqual(t, r.RetryAfter, r.Reset)
	}
}

func confPartial(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		p := confParams(alg, 5, time.Minute)
		assert.Equal(t, int64(2), e.lease(t, key, p, 2, time.Second, "").Granted)
		r := e.lease(t, key, p, 10, time.Second, "")
		assert.Equal(t, int64(3), r.Granted, "want 10 with 3 left")
		assert.Equal(t, int64(0), r.Remaining)
		assert.Equal(t, time.Duration(0), r.RetryAfter)
		r = e.lease(t, key, p, 10, time.Second, "")
		assert.Equal(t, int64(0), r.Granted)
		assert.Positive(t, r.RetryAfter)
	}
}

// confFreesAfterRetry: once denied, waiting RetryAfter frees a permit.
func confFreesAfterRetry(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		p := confParams(alg, 2, 300*time.Millisecond)
		assert.Equal(t, int64(2), e.lease(t, key, p, 2, 0, "").Granted)
		r := e.lease(t, key, p, 1, 0, "")
		require.Equal(t, int64(0), r.Granted)
		require.Positive(t, r.RetryAfter)
		require.LessOrEqual(t, r.RetryAfter, 300*time.Millisecond+time.Millisecond*16)
		if e.clock != nil {
			e.sleep(r.RetryAfter - time.Millisecond)
			assert.Equal(t, int64(0), e.lease(t, key, p, 1, 0, "").Granted, "granted before RetryAfter")
			e.sleep(time.Millisecond)
		} else {
			e.sleep(r.RetryAfter + 5*time.Millisecond)
		}
		assert.Equal(t, int64(1), e.lease(t, key, p, 1, 0, "").Granted, "not granted after RetryAfter")
	}
}

func confTokenBucketRefill(t *testing.T, e *confEnv, key string) {
	p := Params{Algorithm: TokenBucket, Capacity: 4, RefillRate: 10}
	r := e.lease(t, key, p, 4, time.Second, "")
	require.Equal(t, int64(4), r.Granted)
	assert.Equal(t, int64(0), r.Remaining)
	assert.InDelta(t, 400*time.Millisecond, r.Reset, float64(5*time.Millisecond))
	r = e.lease(t, key, p, 1, time.Second, "")
	require.Equal(t, int64(0), r.Granted)
	assert.Positive(t, r.RetryAfter)
	assert.LessOrEqual(t, r.RetryAfter, 100*time.Millisecond)
	e.sleep(250 * time.Millisecond) // 2.5 tokens
	r = e.lease(t, key, p, 4, time.Second, "")
	if e.clock != nil {
		assert.Equal(t, int64(2), r.Granted)
	} else {
		assert.GreaterOrEqual(t, r.Granted, int64(2))
		assert.LessOrEqual(t, r.Granted, int64(4))
	}
	e.sleep(time.Second) // full again, never more than the capacity
	assert.Equal(t, int64(4), e.lease(t, key, p, 10, time.Second, "").Granted)
}

func confTokenBucketZeroRefill(t *testing.T, e *confEnv, key string) {
	p := Params{Algorithm: TokenBucket, Capacity: 2, RefillRate: 0}
	assert.Equal(t, int64(2), e.lease(t, key, p, 5, 0, "").Granted)
	r := e.lease(t, key, p, 1, 0, "")
	assert.Equal(t, int64(0), r.Granted)
	assert.Equal(t, time.Duration(-1), r.RetryAfter, "zero refill: never")
	assert.Equal(t, time.Duration(-1), r.Reset)
	e.sleep(50 * time.Millisecond)
	assert.Equal(t, int64(0), e.lease(t, key, p, 1, 0, "").Granted)
}

// confLeaseCounted: the Need permits a caller uses at once count for one
// window from the call; the rest of the lease may be used until its expiry,
// so it counts until its expiry plus the window, not just the window.
func confLeaseCounted(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		const window, ttl = 200 * time.Millisecond, 200 * time.Millisecond
		p := Params{Algorithm: alg, Limit: 3, Window: window}
		a := e.lease(t, key, p, 3, ttl, "") // Need 1: one used now, two leased
		require.Equal(t, int64(3), a.Granted)
		assert.NotZero(t, a.UsedRef, "the used permit is counted apart from the lease")
		e.sleep(window + ttl/2) // past the window, not past lease expiry + window
		r := e.lease(t, key, p, 3, ttl, "")
		assert.Equal(t, int64(1), r.Granted, "the used permit must count one window from the call, the leased ones until expiry + window")
		r = e.lease(t, key, p, 1, ttl, "")
		assert.Equal(t, int64(0), r.Granted, "a lease stopped counting before its expiry + window")
		assert.Positive(t, r.RetryAfter)
		e.sleep(r.RetryAfter + 5*time.Millisecond)
		assert.Equal(t, int64(1), e.lease(t, key, p, 1, ttl, "").Granted)

		// UseWithin: the caller may use its Need permit up to then, so it
		// counts a window from then.
		k2 := key + ":within"
		ctx := context.Background()
		p1 := Params{Algorithm: alg, Limit: 1, Window: window}
		w, err := e.store.Lease(ctx, &LeaseRequest{Key: []byte(k2), Params: p1, Want: 1, UseWithin: 100 * time.Millisecond})
		require.NoError(t, err)
		require.Equal(t, int64(1), w.Granted)
		e.sleep(window + 30*time.Millisecond)
		assert.Zero(t, e.lease(t, k2, p1, 1, 0, "").Granted, "a permit usable until the call + UseWithin stopped counting a window after the call")
		e.sleep(100 * time.Millisecond)
		assert.Equal(t, int64(1), e.lease(t, k2, p1, 1, 0, "").Granted)
	}
}

// confHeldAtTheLimit: a client that asks for one permit at a time, as
// often as it can, with leases (every grant is the Need part, used at once)
// gets the limit per window. Counted until lease expiry + window, each permit
// would cost window + lease of budget: here half the limit.
func confHeldAtLimit(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		const limit, window, ttl = 10, 200 * time.Millisecond, 200 * time.Millisecond
		p := Params{Algorithm: alg, Limit: limit, Window: window}
		start := e.now()
		var granted int64
		for e.now().Sub(start) < 5*window {
			granted += e.lease(t, key, p, 1, ttl, "").Granted
			e.sleep(2 * time.Millisecond)
		}
		// Calls over 5 windows (the last one may land just past them): the
		// first grants at once, each later window after the one before
		// (plus up to one sub-window for sliding_window, and the loop's
		// step): at least 4 whole windows' worth, at most 6.
		assert.GreaterOrEqual(t, granted, int64(4*limit), "a client held at the limit got less than the limit per window")
		assert.LessOrEqual(t, granted, int64(6*limit))
	}
}

// confRedate: the permits of a lease that its holder reports used (with its
// next call) count for a window from that call, not until the lease's
// expiry plus the window; returned ones stop counting; a lease that has
// expired is not re-dated later than it was.
func confRedate(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		const window, ttl = 200 * time.Millisecond, 2 * time.Second
		p := Params{Algorithm: alg, Limit: 6, Window: window}
		a := e.lease(t, key, p, 6, ttl, "") // 1 used now, 5 leased until now + 2 s
		require.Equal(t, int64(6), a.Granted)
		ctx := context.Background()
		// 3 of the 5 leased permits used, 2 given back: those 2 are granted again.
		r, err := e.store.Lease(ctx, &LeaseRequest{Key: []byte(key), Params: p, Want: 6, LeaseTTL: ttl, Return: 2, Used: 3, ReturnRef: a.Ref})
		require.NoError(t, err)
		require.Equal(t, int64(2), r.Granted, "only the 2 returned permits are free")
		e.sleep(window + 50*time.Millisecond)
		// A window after the report: the 3 re-dated permits and the first
		// call's used one are free; the second call's leased one is not.
		got := e.lease(t, key, p, 6, ttl, "").Granted
		assert.Equal(t, int64(5), got, "used permits must count for a window from the report, not until the lease expires")

		// A lease reported after its expiry keeps its count (moving it to
		// the report would count it longer), and a report alone is no error.
		k2 := key + ":expired"
		b := e.lease(t, k2, p, 6, 10*time.Millisecond, "")
		require.Equal(t, int64(6), b.Granted)
		e.sleep(30 * time.Millisecond)
		r, err = e.store.Lease(ctx, &LeaseRequest{Key: []byte(k2), Params: p, Want: 1, Used: 5, ReturnRef: b.Ref})
		require.NoError(t, err)
		assert.Zero(t, r.Granted)
		e.sleep(window - 5*time.Millisecond) // past the lease's expiry + window, not past the report + window
		assert.Equal(t, int64(6), e.lease(t, k2, p, 6, ttl, "").Granted, "an expired lease was re-dated to the report")
	}
}

// confUnleased: permits a caller used without a lease are counted
// from its next call, before anything is granted, even when nothing can be.
func confUnleased(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		const window = 200 * time.Millisecond
		p := confParams(alg, 5, window)
		ctx := context.Background()
		r, err := e.store.Lease(ctx, &LeaseRequest{Key: []byte(key), Params: p, Want: 5, Unleased: 3})
		require.NoError(t, err)
		assert.Equal(t, int64(2), r.Granted, "the 3 unleased permits were not counted")
		r, err = e.store.Lease(ctx, &LeaseRequest{Key: []byte(key), Params: p, Want: 1, Unleased: 4})
		require.NoError(t, err)
		assert.Zero(t, r.Granted)
		assert.Zero(t, r.Remaining)
		if alg != TokenBucket { // a bucket that refills over a window is not empty again a window later
			e.sleep(window + 20*time.Millisecond)
			assert.Equal(t, int64(5), e.lease(t, key, p, 5, 0, "").Granted, "unleased permits count for one window")

			// UnleasedAgo dates them when the last was let through: a window
			// from then, not from the report.
			k2 := key + ":ago"
			r, err = e.store.Lease(ctx, &LeaseRequest{Key: []byte(k2), Params: p, Want: 5, Unleased: 3, UnleasedAgo: window - 40*time.Millisecond})
			require.NoError(t, err)
			assert.Equal(t, int64(2), r.Granted)
			e.sleep(60 * time.Millisecond)
			assert.Equal(t, int64(3), e.lease(t, k2, p, 5, 0, "").Granted, "unleased permits counted past a window from their use")
			k3 := key + ":old"
			r, err = e.store.Lease(ctx, &LeaseRequest{Key: []byte(k3), Params: p, Want: 5, Unleased: 3, UnleasedAgo: window + 10*time.Millisecond}) // past a window and a sub-window
			require.NoError(t, err)
			assert.Equal(t, int64(5), r.Granted, "permits unleased a window ago no longer count")
		}
	}
}

// confUnleasedParts: unleased permits reported in parts are each placed
// at their own time: the sliding algorithms count a part for a window from
// when it was used, not from the report, and a token bucket takes each part
// when it was used and refills after it.
func confUnleasedParts(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		const window = 200 * time.Millisecond
		p := confParams(alg, 10, window)
		e.lease(t, key, p, 1, 0, "")
		e.sleep(2 * window) // the bucket is full again, the window empty
		req := &LeaseRequest{Key: []byte(key), Params: p, Want: 10, Unleased: 2,
			UnleasedBefore: [UnleasedParts]UnleasedPart{{N: 4, Ago: 60 * time.Millisecond}, {N: 4, Ago: 180 * time.Millisecond}}}
		r := e.leaseReq(t, req)
		if alg == TokenBucket {
			// Full at 10, 4 taken 180 ms ago, 6 refilled (50/s) up to 10 by
			// 60 ms ago, 4 taken, 3 refilled, 2 taken now: 7, not 0.
			assert.InDelta(t, 7, r.Granted, 1, "the parts were not taken at their times")
			return
		}
		assert.Zero(t, r.Granted, "every part counts within its window")
		e.sleep(30 * time.Millisecond)
		assert.Equal(t, int64(4), e.lease(t, key, p, 10, 0, "").Granted, "the part used 180 ms before the report left the window 20 ms after it")
	}
}

// confBoundaryBurst packs requests at the end of one window and the start of
// the next, and then offers a steady stream, and checks that no interval of
// one window admits more than the limit, and that the limit is reached. The
// bursts are aligned both on the clock's window grid (where a fixed window
// would reset) and on that grid shifted by the lease lifetime (where a fixed
// window over lease expiries would reset).
func confBoundaryBurst(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		const limit, window, ttl = 5, 200 * time.Millisecond, 50 * time.Millisecond
		p := Params{Algorithm: alg, Limit: limit, Window: window}
		var grants []time.Time
		// A grant is used when its answer is back; the caller says it uses
		// the Need permit within ttl of the call (UseWithin), as a pod that
		// waits at most its store timeout does. (Dated before the call, a
		// grant whose call took longer to reach the store than another's
		// would look earlier than the store saw it.)
		ctx := context.Background()
		take := func(want int64) {
			r, err := e.store.Lease(ctx, &LeaseRequest{Key: []byte(key), Params: p, Want: want, LeaseTTL: ttl, UseWithin: ttl})
			require.NoError(t, err)
			at := e.now()
			for i := int64(0); i < r.Granted; i++ {
				grants = append(grants, at)
			}
		}
		// waitPhase sleeps until (now + shift) mod window == phase.
		waitPhase := func(shift, phase time.Duration) {
			ms := (e.now().Add(shift).UnixMilli()) % window.Milliseconds()
			d := (phase - time.Duration(ms)*time.Millisecond + window) % window
			e.sleep(d)
		}
		burst := func() {
			for i := 0; i < 4; i++ {
				take(2)
			}
		}
		for _, shift := range []time.Duration{0, ttl} {
			e.sleep(window + ttl + window/10) // the budget is whole again
			waitPhase(shift, window-15*time.Millisecond)
			burst()
			waitPhase(shift, 5*time.Millisecond)
			burst()
		}
		e.sleep(window + ttl + window/10)
		for i := 0; i < 40; i++ { // a steady stream over two windows
			take(1)
			e.sleep(10 * time.Millisecond)
		}
		require.GreaterOrEqual(t, len(grants), 3*limit, "the limit was not reached in each phase")
		slices.SortFunc(grants, func(a, b time.Time) int { return a.Compare(b) })
		for i, j := 0, 0; i < len(grants); i++ {
			for grants[i].Sub(grants[j]) >= window {
				j++
			}
			require.LessOrEqual(t, i-j+1, limit, "%d grants within %v ending at %v", i-j+1, window, grants[i].Format("15:04:05.000"))
		}
	}
}

func confDuplicateID(t *testing.T, e *confEnv, key string) {
	p := Params{Algorithm: SlidingLog, Limit: 2, Window: time.Minute}
	r := e.lease(t, key, p, 1, 0, "req-1")
	require.Equal(t, int64(1), r.Granted)
	assert.False(t, r.Duplicate)
	r = e.lease(t, key, p, 1, 0, "req-1")
	assert.True(t, r.Duplicate, "retry with the same request ID")
	assert.Equal(t, int64(0), r.Granted, "a duplicate takes nothing")
	assert.Equal(t, int64(1), r.Remaining)
	assert.Equal(t, int64(1), e.lease(t, key, p, 1, 0, "req-2").Granted)
	r = e.lease(t, key, p, 1, 0, "req-3")
	assert.Equal(t, int64(0), r.Granted, "a new ID does not pass the limit")
	assert.False(t, r.Duplicate)
	assert.Positive(t, r.RetryAfter)
	r = e.lease(t, key, p, 1, 0, "req-3")
	assert.False(t, r.Duplicate, "a denied ID was not counted")
	assert.True(t, e.lease(t, key, p, 1, 0, "req-1").Duplicate, "a counted ID stays counted at the limit")
	assert.Equal(t, int64(0), e.lease(t, key, p, 1, 0, "").Granted)
	// The same ID under another key is another request.
	assert.Equal(t, int64(1), e.lease(t, key+":other", p, 1, 0, "req-1").Granted)
}

// confIDAllowance: a counted request ID spares its next RequestIDRetries
// repeats, and every repeat past them is counted as a new request, for as
// long as the ID's window lasts: one constant ID cannot switch the limit
// off.
func confIDAllowance(t *testing.T, e *confEnv, key string) {
	p := Params{Algorithm: SlidingLog, Limit: 5, Window: time.Minute}
	req := func(rid string) LeaseResult {
		return e.leaseReq(t, &LeaseRequest{Key: []byte(key), Params: p, Want: 1, RequestID: []byte(rid),
			RequestIDRetries: 2, RequestIDWindow: time.Minute})
	}
	r := req("same")
	require.Equal(t, int64(1), r.Granted)
	assert.False(t, r.Duplicate)
	assert.False(t, r.Repeated, "the first call is no repeat")
	for i := 1; i <= 2; i++ {
		r = req("same")
		assert.True(t, r.Duplicate, "repeat %d is within the allowance", i)
		assert.False(t, r.Repeated)
		assert.Equal(t, int64(0), r.Granted, "a spared repeat takes nothing")
		assert.Equal(t, int64(4), r.Remaining, "repeat %d", i)
	}
	granted := int64(0)
	for i := 3; i <= 8; i++ {
		r = req("same")
		assert.False(t, r.Duplicate, "repeat %d is past the allowance", i)
		assert.True(t, r.Repeated, "repeat %d", i)
		granted += r.Granted
	}
	assert.Equal(t, int64(4), granted, "repeats past the allowance count against the limit")
	assert.Equal(t, int64(0), r.Remaining)
	assert.Positive(t, r.RetryAfter, "a counted repeat over the limit is refused as any request")
	// Another ID under the key has an allowance of its own, once counted:
	// at the limit it is refused and not recorded, so it is no repeat.
	r = req("other")
	assert.Equal(t, int64(0), r.Granted)
	assert.False(t, r.Duplicate)
	assert.False(t, req("other").Duplicate, "a refused ID was not counted")
}

// confIDWindow: a repeat after the ID's window is counted afresh, and
// starts a new allowance.
func confIDWindow(t *testing.T, e *confEnv, key string) {
	p := Params{Algorithm: SlidingLog, Limit: 100, Window: time.Minute}
	const window = 300 * time.Millisecond
	req := func() LeaseResult {
		return e.leaseReq(t, &LeaseRequest{Key: []byte(key), Params: p, Want: 1, RequestID: []byte("w"),
			RequestIDRetries: 1, RequestIDWindow: window})
	}
	require.Equal(t, int64(1), req().Granted)
	assert.True(t, req().Duplicate, "within the window")
	assert.True(t, req().Repeated, "past the allowance")
	e.sleep(window + 50*time.Millisecond)
	r := req()
	assert.False(t, r.Duplicate, "after the window")
	assert.False(t, r.Repeated, "after the window the ID is new")
	assert.Equal(t, int64(1), r.Granted)
	assert.True(t, req().Duplicate, "a new allowance")
	r = req()
	assert.True(t, r.Repeated, "past the new allowance")
	assert.Equal(t, int64(96), r.Remaining, "counted: the first call, the repeat past the allowance, the call after the window, this one")
}

// confIDNoRetries: with no retries allowed, a repeated ID counts every time.
func confIDNoRetries(t *testing.T, e *confEnv, key string) {
	p := Params{Algorithm: SlidingLog, Limit: 3, Window: time.Minute}
	for i := range 4 {
		r := e.leaseReq(t, &LeaseRequest{Key: []byte(key), Params: p, Want: 1, RequestID: []byte("n"), RequestIDWindow: time.Minute})
		assert.False(t, r.Duplicate, "call %d", i)
		want := int64(1)
		if i == 3 {
			want = 0 // over the limit
		}
		assert.Equal(t, want, r.Granted, "call %d", i)
	}
}

func confIgnoresID(t *testing.T, e *confEnv, key string) {
	p := Params{Algorithm: SlidingWindow, Limit: 2, Window: time.Minute}
	assert.Equal(t, int64(1), e.lease(t, key, p, 1, 0, "req-1").Granted)
	r := e.lease(t, key, p, 1, 0, "req-1")
	assert.Equal(t, int64(1), r.Granted)
	assert.False(t, r.Duplicate)
}

func confZeroLimit(t *testing.T, e *confEnv, key string) {
	for _, alg := range []Algorithm{SlidingWindow, SlidingLog} {
		r := e.lease(t, fmt.Sprintf("%s:%d", key, alg), Params{Algorithm: alg, Limit: 0, Window: time.Second}, 1, 0, "")
		assert.Equal(t, int64(0), r.Granted)
		assert.Equal(t, time.Second, r.RetryAfter, "algorithm %d", alg)
	}
	r := e.lease(t, key+":tb", Params{Algorithm: TokenBucket, Capacity: 0, RefillRate: 5}, 1, 0, "")
	assert.Equal(t, int64(0), r.Granted)
	assert.Equal(t, time.Duration(-1), r.RetryAfter, "capacity 0 never grants")
}

// confAlgorithmChange: a rule reload may change a key's algorithm; the store
// must keep working (no WRONGTYPE).
func confAlgorithmChange(t *testing.T, e *confEnv, key string) {
	for _, alg := range []Algorithm{SlidingWindow, SlidingLog, TokenBucket, SlidingWindow} {
		assert.Equal(t, int64(1), e.lease(t, key, confParams(alg, 10, time.Minute), 1, 0, "").Granted, "algorithm %d", alg)
	}
}

// confConcurrent: many callers at once never get more than the limit in total.
func confConcurrent(t *testing.T, e *confEnv, key string) {
	for _, alg := range []Algorithm{SlidingWindow, SlidingLog, TokenBucket} {
		k := fmt.Sprintf("%s:%d", key, alg)
		p := confParams(alg, 50, time.Hour)
		var mu sync.Mutex
		var total int64
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					res, err := e.store.Lease(context.Background(), &LeaseRequest{Key: []byte(k), Params: p, Want: 3, LeaseTTL: time.Second})
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					total += res.Granted
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, int64(50), total, "algorithm %d", alg)
	}
}

func confInvalid(t *testing.T, e *confEnv, key string) {
	ok := Params{Algorithm: SlidingWindow, Limit: 1, Window: time.Second}
	for name, req := range map[string]*LeaseRequest{
		"nil":                         nil,
		"no key":                      {Params: ok, Want: 1},
		"negative want":               {Key: []byte(key), Params: ok, Want: -1},
		"look that reports used":      {Key: []byte(key), Params: ok, Used: 1},
		"report alone of a use":       {Key: []byte(key), Params: ok, Used: 1, Unleased: 1},
		"negative ttl":                {Key: []byte(key), Params: ok, Want: 1, LeaseTTL: -1},
		"zero window":                 {Key: []byte(key), Params: Params{Limit: 1}, Want: 1},
		"negative rate":               {Key: []byte(key), Params: Params{Algorithm: TokenBucket, Capacity: 1, RefillRate: -1}, Want: 1},
		"unknown alg":                 {Key: []byte(key), Params: Params{Algorithm: 9, Limit: 1, Window: time.Second}, Want: 1},
		"negative used":               {Key: []byte(key), Params: ok, Want: 1, Used: -1},
		"negative use within":         {Key: []byte(key), Params: ok, Want: 1, UseWithin: -1},
		"negative unleased":           {Key: []byte(key), Params: ok, Want: 1, Unleased: -1},
		"unleased ago over its bound": {Key: []byte(key), Params: ok, Want: 1, Unleased: 1, UnleasedAgo: MaxWindow + 1},
		"log unleased over its bound": {Key: []byte(key), Params: Params{Algorithm: SlidingLog, Limit: 1, Window: time.Second}, Want: 1, Unleased: MaxLogTokens + 1},
	} {
		_, err := e.store.Lease(context.Background(), req)
		assert.Error(t, err, name)
	}
}

// confEveryKeyHasTTL scans every node: each key the scripts wrote has a TTL.
func confEveryKeyHasTTL(t *testing.T, e *confEnv) {
	ctx := context.Background()
	seen := 0
	for addr, node := range e.client.Nodes() {
		keys, err := node.Do(ctx, node.B().Keys().Pattern("test:*").Build()).AsStrSlice()
		require.NoError(t, err, addr)
		for _, k := range keys {
			pttl, err := node.Do(ctx, node.B().Pttl().Key(k).Build()).AsInt64()
			require.NoError(t, err, k)
			assert.Positive(t, pttl, "key %s on %s has no TTL", k, addr)
			assert.LessOrEqual(t, pttl, int64(tokenBucketMaxKeepMS), "key %s", k)
			seen++
		}
	}
	assert.Greater(t, seen, 10, "the suite left too few keys to check")
}

// confSlotRouting: the limits of many tenants spread over all three masters,
// and every script runs on each of them.
func confSlotRouting(t *testing.T, e *confEnv, c *redistest.Cluster) {
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		tenant := fmt.Sprintf("tenant-%d", i)
		key := string(AppendKeyStrings(nil, "", "tenant", tenant))
		for _, alg := range []Algorithm{SlidingWindow, SlidingLog, TokenBucket} {
			assert.Equal(t, int64(1), e.lease(t, key, confParams(alg, 5, time.Second), 1, 0, "id").Granted)
		}
	}
	for _, addr := range c.Addrs {
		node, ok := e.client.Nodes()[addr]
		require.True(t, ok, addr)
		keys, err := node.Do(ctx, node.B().Keys().Pattern("test:{tenant:*").Build()).AsStrSlice()
		require.NoError(t, err)
		assert.NotEmpty(t, keys, "no tenant keys on %s", addr)
		for _, k := range keys {
			assert.True(t, strings.HasSuffix(k, "}:sw") || strings.Contains(k, "}:sl") || strings.HasSuffix(k, "}:tb"), k)
		}
	}
}

// confAllOrNothing: a request for need tokens gets all of them or none, and
// a refusal takes nothing from the budget.
func confAllOrNothing(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		p := confParams(alg, 10, time.Minute)
		need := func(want, need int64) LeaseResult {
			t.Helper()
			res, err := e.store.Lease(context.Background(), &LeaseRequest{Key: []byte(key), Params: p, Want: want, Need: need})
			require.NoError(t, err)
			return res
		}
		require.Equal(t, int64(7), need(7, 7).Granted)
		r := need(4, 4)
		assert.Equal(t, int64(0), r.Granted, "4 of the 3 left")
		assert.Equal(t, int64(3), r.Remaining, "the refusal took nothing")
		assert.Positive(t, r.RetryAfter)
		r = need(8, 2)
		assert.Equal(t, int64(3), r.Granted, "a lease may be partial above need")
		r = need(11, 11)
		assert.Equal(t, int64(0), r.Granted)
		assert.Equal(t, time.Duration(-1), r.RetryAfter, "more than the limit: never")
	}
}

// confReturn: permits given back are uncounted where their lease was
// counted, and only those: another holder's permits stay counted.
func confReturn(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		p := confParams(alg, 10, time.Minute)
		a := e.lease(t, key, p, 4, time.Second, "")
		require.Equal(t, int64(4), a.Granted)
		require.Equal(t, int64(6), e.lease(t, key, p, 6, time.Second, "").Granted)
		ctx := context.Background()
		r, err := e.store.Lease(ctx, &LeaseRequest{Key: []byte(key), Params: p, Want: 10, LeaseTTL: time.Second, Return: 3, ReturnRef: a.Ref})
		require.NoError(t, err)
		assert.Equal(t, int64(3), r.Granted, "the 3 returned permits are granted again, and no more")
		assert.Equal(t, int64(0), r.Remaining)
		if alg != TokenBucket {
			// The used permit (Need) is counted apart and goes back there.
			require.NotZero(t, a.UsedRef)
			r, err = e.store.Lease(ctx, &LeaseRequest{Key: []byte(key), Params: p, Want: 10, LeaseTTL: time.Second, Return: 1, ReturnRef: a.UsedRef})
			require.NoError(t, err)
			assert.Equal(t, int64(1), r.Granted, "the returned used permit is granted again, and no more")
		}
		// A lease that no longer counts (or another algorithm's ref) uncounts nothing.
		if alg != TokenBucket {
			r, err = e.store.Lease(ctx, &LeaseRequest{Key: []byte(key), Params: p, Want: 1, Return: 1, ReturnRef: 12345})
			require.NoError(t, err)
			assert.Equal(t, int64(0), r.Granted, "a return with an unknown ref uncounted something")
		}
	}
}

// confFirstFree: an answer says when the first (oldest) counted permit
// leaves the window (FirstFree) as well as the last (Reset): the budget
// grows back between the two, not from the answer on. A token bucket
// refills from now on: 0.
func confFirstFree(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		const window, step, limit = 400 * time.Millisecond, 150 * time.Millisecond, 10
		g := window / 40 // a sliding_window count lasts to its sub-window's end
		late := time.Duration(0)
		if e.clock == nil {
			late = 100 * time.Millisecond // Redis' clock runs on between the test's steps
		}
		p := confParams(alg, limit, window)
		r := e.lease(t, key, p, 2, 0, "")
		require.Equal(t, int64(2), r.Granted)
		if alg == TokenBucket {
			assert.Zero(t, r.FirstFree, "a bucket refills from now on")
			e.sleep(step)
			r = e.lease(t, key, p, 3, 0, "")
			assert.Zero(t, r.FirstFree, "a bucket refills from now on")
			assert.Positive(t, r.Reset)
			return
		}
		assert.GreaterOrEqual(t, r.FirstFree, window-late, "the only permits counted leave a window after the call")
		assert.LessOrEqual(t, r.FirstFree, window+g)
		e.sleep(step)
		r = e.lease(t, key, p, 3, 0, "")
		require.Equal(t, int64(3), r.Granted)
		assert.GreaterOrEqual(t, r.FirstFree, window-step-late, "the first call's permits leave first")
		assert.LessOrEqual(t, r.FirstFree, window-step+g, "the first call's permits leave first")
		assert.GreaterOrEqual(t, r.Reset, window-late, "this call's permits leave last")
		assert.Greater(t, r.Reset, r.FirstFree)
		e.sleep(2 * step) // past the first call's window, not the second's
		r = e.lease(t, key, p, 1, 0, "")
		require.Equal(t, int64(1), r.Granted)
		assert.Equal(t, int64(limit-4), r.Remaining, "the first call's permits left")
		assert.GreaterOrEqual(t, r.FirstFree, window-2*step-late, "the second call's permits leave first now")
		assert.LessOrEqual(t, r.FirstFree, window-2*step+g)
	}
}

// confEdgeValues: the bounds of every parameter work, answers are exact, and
// every key a call touched has a TTL (an error must not leave one without).
func confEdgeValues(t *testing.T, e *confEnv, key string) {
	for i, tc := range []struct {
		p               Params
		want            int64
		granted, remain int64
	}{
		{Params{Algorithm: SlidingWindow, Limit: MaxLimit, Window: MaxWindow}, MaxLimit, MaxLimit, 0},
		{Params{Algorithm: SlidingWindow, Limit: MaxLimit, Window: time.Millisecond}, 1, 1, MaxLimit - 1},
		{Params{Algorithm: SlidingLog, Limit: MaxLimit, Window: MaxWindow}, MaxLogTokens, MaxLogTokens, MaxLimit - MaxLogTokens},
		{Params{Algorithm: TokenBucket, Capacity: MaxLimit, RefillRate: MaxLimit}, MaxLimit, MaxLimit, 0},
		{Params{Algorithm: TokenBucket, Capacity: 1, RefillRate: MinRefillRate}, 1, 1, 0},
		{Params{Algorithm: TokenBucket, Capacity: 31, RefillRate: MinRefillRate}, 31, 31, 0},
	} {
		k := fmt.Sprintf("%s:edge%d", key, i)
		r := e.lease(t, k, tc.p, tc.want, time.Minute, "")
		assert.Equal(t, tc.granted, r.Granted, "case %d", i)
		assert.Equal(t, tc.remain, r.Remaining, "case %d", i)
		r = e.lease(t, k, tc.p, 1, time.Minute, "")
		if tc.remain == 0 && (tc.p.Algorithm != TokenBucket || tc.p.RefillRate < 1) { // a fast bucket refills at once
			assert.Equal(t, int64(0), r.Granted, "case %d", i)
			assert.True(t, r.RetryAfter == -1 || r.RetryAfter > 0, "case %d: retry %v", i, r.RetryAfter)
		}
		e.assertTTLs(t, k)
	}
}

// confOutOfBounds: values past the bounds are errors, and leave no key
// without a TTL.
func confOutOfBounds(t *testing.T, e *confEnv, key string) {
	for i, p := range []Params{
		{Algorithm: TokenBucket, Capacity: 5, RefillRate: 1e-300},
		{Algorithm: TokenBucket, Capacity: MaxLimit, RefillRate: 1},
		{Algorithm: TokenBucket, Capacity: MaxLimit + 1, RefillRate: 1},
		{Algorithm: SlidingWindow, Limit: 1<<63 - 1, Window: time.Second},
		{Algorithm: SlidingLog, Limit: 10, Window: MaxWindow + time.Millisecond},
	} {
		k := fmt.Sprintf("%s:oob%d", key, i)
		_, err := e.store.Lease(context.Background(), &LeaseRequest{Key: []byte(k), Params: p, Want: 1})
		assert.Error(t, err, "case %d", i)
		e.assertTTLs(t, k)
	}
	_, err := e.store.Lease(context.Background(), &LeaseRequest{Key: []byte(key), Params: Params{Algorithm: SlidingLog, Limit: 1 << 20, Window: time.Second}, Want: MaxLogTokens + 1})
	assert.Error(t, err, "sliding_log grants at most MaxLogTokens per call")
	_, err = e.store.Lease(context.Background(), &LeaseRequest{Key: []byte(key), Params: Params{Algorithm: SlidingLog, Limit: 10, Window: time.Second}, Want: 2, Need: 3})
	assert.Error(t, err, "need over want")
}

// assertTTLs checks that every Redis key of the store key has a TTL.
func (e *confEnv) assertTTLs(t *testing.T, key string) {
	t.Helper()
	if e.client == nil {
		return
	}
	ctx := context.Background()
	for _, suffix := range []string{suffixSlidingWindow, suffixSlidingLog, suffixSlidingLogMeta, suffixSlidingLogIDs, suffixTokenBucket} {
		k := "test:" + key + suffix
		cmd := e.client.B().Pttl().Key(k).Build()
		pttl, err := e.client.Do(ctx, cmd).AsInt64()
		require.NoError(t, err, k)
		assert.True(t, pttl == -2 || pttl > 0, "key %s: PTTL %d", k, pttl)
	}
}

// confLook: a lease of no permits (a look) answers the remaining budget and
// the retry-after of its Need, and takes nothing, however often it runs.
func confLook(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		p := confParams(alg, 3, time.Minute)
		if alg == Quota {
			p = quotaParams(3, e.hourEndingIn(t, 30*time.Minute))
		}
		look := func(need int64) LeaseResult {
			return e.leaseReq(t, &LeaseRequest{Key: []byte(key), Params: p, Need: need})
		}
		r := look(1)
		assert.Equal(t, LeaseResult{Remaining: 3}, LeaseResult{Granted: r.Granted, Remaining: r.Remaining, RetryAfter: r.RetryAfter}, "a new key")
		require.Equal(t, int64(2), e.lease(t, key, p, 2, 0, "").Granted)
		for range 3 {
			r = look(1)
			assert.Equal(t, int64(0), r.Granted)
			assert.Equal(t, int64(1), r.Remaining)
			assert.Equal(t, time.Duration(0), r.RetryAfter, "one permit remains")
		}
		r = look(2)
		assert.Equal(t, int64(0), r.Granted)
		assert.Equal(t, int64(1), r.Remaining)
		assert.Positive(t, r.RetryAfter, "two permits do not remain")
		assert.Equal(t, time.Duration(-1), look(4).RetryAfter, "more than the limit never passes")
		require.Equal(t, int64(1), e.lease(t, key, p, 1, 0, "").Granted, "the looks took nothing")
		r = look(1)
		assert.Equal(t, int64(0), r.Remaining)
		assert.Positive(t, r.RetryAfter)
		assert.Equal(t, int64(0), e.lease(t, key, p, 1, 0, "").Granted)
	}
}

// confReset: a reset makes a used budget whole again, under any algorithm
// the key was written with, and leaves other keys as they were.
func confReset(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		p := confParams(alg, 2, time.Minute)
		if alg == Quota {
			p = quotaParams(2, e.hourEndingIn(t, 30*time.Minute))
		}
		other := strings.Replace(key, "{", "{other:", 1)
		require.Equal(t, int64(2), e.lease(t, key, p, 2, time.Second, "").Granted)
		require.Equal(t, int64(2), e.lease(t, other, p, 2, time.Second, "").Granted)
		require.Equal(t, int64(0), e.lease(t, key, p, 1, 0, "").Granted)
		require.NoError(t, e.store.Reset(context.Background(), []byte(key), p))
		r := e.lease(t, key, p, 2, 0, "")
		assert.Equal(t, int64(2), r.Granted, "the budget is whole again")
		assert.Equal(t, int64(0), e.lease(t, other, p, 1, 0, "").Granted, "another key keeps its counts")
	}
}

// confReportAlone: a call that reports permits used without a lease and
// asks for none (a cost settled over its estimate) counts them, past the
// limit too, and grants nothing: the overdraft is repaid before the key
// is granted again (a sliding window's permits leave a window after; a
// token bucket refills from below zero).
func confReportAlone(alg Algorithm) func(*testing.T, *confEnv, string) {
	return func(t *testing.T, e *confEnv, key string) {
		const window = 2 * time.Second
		p := confParams(alg, 5, window)
		if alg == Quota {
			p = quotaParams(5, e.hourEndingIn(t, 30*time.Minute))
		}
		require.Equal(t, int64(4), e.lease(t, key, p, 4, 0, "").Granted)
		r := e.leaseReq(t, &LeaseRequest{Key: []byte(key), Params: p, Unleased: 3})
		assert.Zero(t, r.Granted, "a report alone grants nothing")
		look := e.leaseReq(t, &LeaseRequest{Key: []byte(key), Params: p})
		assert.Zero(t, look.Remaining, "7 counted for a limit of 5")
		assert.Zero(t, e.lease(t, key, p, 1, 0, "").Granted)
		if alg == TokenBucket {
			// 2.5 tokens a second: 0.8 s refills 2, which repay the
			// debt of 2 and leave none; 1.2 s more refill 3.
			e.sleep(800 * time.Millisecond)
			assert.Zero(t, e.lease(t, key, p, 1, 0, "").Granted, "the overdraft is repaid first")
			e.sleep(1200 * time.Millisecond)
			assert.Equal(t, int64(3), e.lease(t, key, p, 5, 0, "").Granted, "then the bucket refills")
		}
	}
}
