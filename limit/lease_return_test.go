package limit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestNeverRefusedUnderTheLimit offers one tenant 70% of its limit (with
// ±30% jitter on every client's pace) for several 1-second windows, under
// each algorithm, through 1 or 3 limiters sharing one redis-server (each
// with its own client) and from 1 or 20 concurrent clients: no request may
// be refused. Leases that expire unused must go back to the store.
func TestNeverRefusedUnderTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	const limit, window, run = 300, time.Second, 2500 * time.Millisecond
	for _, alg := range []store.Algorithm{store.SlidingWindow, store.SlidingLog, store.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) { // one algorithm at a time: the machine is shared
			neverRefused(t, srv, alg, limit, window, run, nil)
		})
	}
	// A policy keyed by a header, and a calendar quota (offered 70% of its
	// period's budget within the run).
	t.Run("policy", func(t *testing.T) {
		neverRefused(t, srv, store.SlidingWindow, limit, window, run, &catalog.PolicyLimit{Limit: limit, Window: confutil.Duration(window)})
	})
	t.Run("quota", func(t *testing.T) {
		neverRefused(t, srv, store.SlidingWindow, limit, run, run, &catalog.PolicyLimit{Limit: limit, Period: store.Year})
	})
}

// neverRefused runs the test under the tenant limit, or, with pl, under a
// policy of that one limit keyed by X-User-Id.
func neverRefused(t *testing.T, srv *redistest.Server, alg store.Algorithm, limit int64, window, run time.Duration, pl *catalog.PolicyLimit) {
	{
		for _, pods := range []int{1, 3} {
			for _, clients := range []int{1, 20} {
				name := fmt.Sprintf("%dpods/%dclients", pods, clients)
				t.Run(name, func(t *testing.T) { // one at a time too: 20 clients under -race fill both cores
					cfg := testLimitsConfig(func(c *Config) {
						// The tests' store deadline (a second): a call that times
						// out is decided by the local policy, which keeps to what
						// the store's last answer left and may refuse a client
						// under its limit; how often depends on the machine's
						// load. The fault suite holds that path to its promise
						// (45% of the limit through a pause).
						c.Algorithm, c.Tenant, c.Window = alg, limit, window
					})
					var ps *catalog.PolicySet
					if pl != nil {
						cfg.Tenant = 0
						ps = withPolicies(t, cfg, catalog.Policy{Name: "users", Key: []string{"header:X-User-Id"}, Limits: []catalog.PolicyLimit{*pl}})
					}
					var limiters []*Limiter
					for range pods {
						st := newRedisStore(t, srv.Addr)
						limiters = append(limiters, newTestLimiter(t, cfg, st, Options{LivePods: func() int { return pods }, Policies: ps}))
					}
					tenant := fmt.Sprintf("t-%s-%d-%d", alg, pods, clients)
					user := headers{"X-User-Id": tenant}
					period := time.Duration(clients) * window / time.Duration(limit*7/10)
					var refused, allowed atomic.Int64
					var first sync.Once
					var firstRefusal Decision
					start := time.Now()
					var wg sync.WaitGroup
					for c := range clients {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := 0; time.Since(start) < run; i++ {
								d := limiters[(c+i)%pods].Allow(context.Background(), &Request{Tenant: tenant, Plan: "FREE", Attrs: user})
								if pl != nil && d.Scope != ScopePolicy {
									refused.Add(1) // not decided by the policy
								}
								if d.Allowed {
									allowed.Add(1)
								} else {
									refused.Add(1)
									first.Do(func() { firstRefusal = d })
								}
								time.Sleep(time.Duration(float64(period) * (0.7 + 0.6*rand.Float64())))
							}
						}()
					}
					wg.Wait()
					t.Logf("%d allowed, %d refused (first refusal %+v)", allowed.Load(), refused.Load(), firstRefusal)
					// How many the clients offered depends on how fast the
					// machine runs them (a busy one offers far fewer than 70%);
					// the promise is about those offered.
					assert.Positive(t, allowed.Load(), "no request offered")
					assert.Zero(t, refused.Load(), "a client under its limit was refused")
				})
			}
		}
	}
}

// TestTimedOutLeaseSpendsNoBudget pauses Redis (SIGSTOP) past the call's
// deadline while a lease for the whole budget is sent: when Redis runs the
// call later, it grants nothing, so the whole budget is still usable.
func TestTimedOutLeaseSpendsNoBudget(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []store.Algorithm{store.SlidingWindow, store.SlidingLog, store.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			st := newRedisStore(t, srv.Addr)
			p := testParams(alg, 10, time.Hour)
			key := "{timeout:" + alg.String() + "}"
			ctx := context.Background()
			// Warm up: the store learns Redis' clock.
			_, err := st.Lease(ctx, &store.LeaseRequest{Key: []byte(key + "warm"), Params: p, Want: 1})
			require.NoError(t, err)

			srv.Pause()
			cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_, err = st.Lease(cctx, &store.LeaseRequest{Key: []byte(key), Params: p, Want: 10, Need: 10, LeaseTTL: time.Second})
			cancel()
			require.Error(t, err)
			time.Sleep(100 * time.Millisecond) // past the deadline
			srv.Resume()
			time.Sleep(50 * time.Millisecond) // Redis runs the late call now

			res, err := st.Lease(ctx, &store.LeaseRequest{Key: []byte(key), Params: p, Want: 10, Need: 10})
			require.NoError(t, err)
			assert.Equal(t, int64(10), res.Granted, "the timed-out call spent budget")
		})
	}
}

// TestLimiterTimedOutLeaseSpendsNoBudget: the same through a Limiter, whose
// store call times out (limits.store_timeout) while Redis is paused; another
// pod then gets the whole budget.
func TestLimiterTimedOutLeaseSpendsNoBudget(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window, c.StoreTimeout, c.MaxLease = 10, time.Hour, 50*time.Millisecond, 10
	})
	slow := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{})
	require.True(t, slow.Allow(context.Background(), &Request{IP: []byte("warm")}).Allowed)
	srv.Pause()
	slow.Allow(context.Background(), &Request{IP: []byte("10.9.9.9"), Tokens: 10}) // times out: local policy
	time.Sleep(100 * time.Millisecond)
	srv.Resume()
	time.Sleep(50 * time.Millisecond)
	other := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{})
	d := other.Allow(context.Background(), &Request{IP: []byte("10.9.9.9"), Tokens: 10})
	assert.True(t, d.Allowed, "the timed-out lease spent budget: %+v", d)
}

// TestLimiterReturnsUnusedPermits: permits leased but not used before their
// lease expires go back to the store with the next lease call, so another pod
// can use them at once. The limiters run on the test's clock: the lease
// expires when the test says, not when a busy machine gets to it.
func TestLimiterReturnsUnusedPermits(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []store.Algorithm{store.SlidingWindow, store.SlidingLog, store.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := testLimitsConfig(func(c *Config) {
				c.Algorithm, c.IP, c.Window, c.LeaseTTL, c.MaxLease = alg, 20, time.Hour, time.Second, 20
			})
			clock := &testClock{at: time.Now()}
			a := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{Now: clock.now})
			b := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{Now: clock.now})
			ip := []byte("ret-" + alg.String())
			used := int64(0)
			for used < 3 || a.heldPermits(ip) == 0 {
				require.True(t, a.Allow(context.Background(), &Request{IP: ip}).Allowed)
				used++
				require.Less(t, used, int64(15), "pod a never held unused permits")
			}
			left := a.heldPermits(ip)
			clock.add(cfg.LeaseTTL + time.Millisecond) // a's lease expires unused
			// The next call of pod a gives the unused permits back.
			require.True(t, a.Allow(context.Background(), &Request{IP: ip}).Allowed)
			used++
			got, _ := allowN(b, &Request{IP: ip}, 20)
			assert.Equal(t, 20-used-a.heldPermits(ip), int64(got), "pod b could not use the %d permits a let expire", left)
		})
	}
}

// heldPermits is how many unused permits the limiter holds for an IP limit.
func (l *Limiter) heldPermits(ip []byte) int64 {
	b := l.table.get(store.AppendKey(nil, "", "ip", ip), l.now().UnixNano())
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.permits
}

// TestLimiterLateAnswerGivesPermitsBack: a lease whose answer comes after
// limits.store_timeout (a busy pod or Redis) is decided by the failure
// policy, and the permits of the late answer go back to the store.
func TestLimiterLateAnswerGivesPermitsBack(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window, c.StoreTimeout, c.MaxLease = 10, time.Hour, 20*time.Millisecond, 10
	})
	slowStore := newRedisStore(t, srv.Addr)
	slowStore.delay = 60 * time.Millisecond
	slow := newTestLimiter(t, cfg, slowStore, Options{})
	before := lateReturns.Get()
	slow.Allow(context.Background(), &Request{IP: []byte("10.8.8.8"), Tokens: 10})
	other := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{})
	// Until the slow store's second call (the return, sent once the late
	// grant was answered) and a look (which counts nothing) that finds the
	// permits back: the counter is the process's, and a late answer of
	// another test's limiter may move it first.
	back := func() bool {
		return slowStore.calls.Load() >= 2 && other.Allow(context.Background(), &Request{IP: []byte("10.8.8.8"), Tokens: 10, Peek: true}).Allowed
	}
	deadline := time.Now().Add(2 * time.Second)
	for !back() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.Greater(t, lateReturns.Get(), before, "the late answer's permits were not given back")
	d := other.Allow(context.Background(), &Request{IP: []byte("10.8.8.8"), Tokens: 10})
	assert.True(t, d.Allowed, "the late lease spent budget: %+v", d)
}

// TestLocalShareCountsStorePermits: a pod that let its whole share through
// on the store's permits refuses when the store then fails. Before, the
// local share started full at the first timeout and let a second window's
// worth through.
func TestLocalShareCountsStorePermits(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []store.Algorithm{store.SlidingWindow, store.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := testLimitsConfig(func(c *Config) {
				c.Algorithm, c.IP, c.Window, c.StoreTimeout, c.MaxLease = alg, 10, time.Hour, 50*time.Millisecond, 4
			})
			l := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{})
			ip := []byte("local-share-" + alg.String())
			got, _ := allowN(l, &Request{IP: ip}, 10)
			require.Equal(t, 10, got)
			// The grant that spent the budget is remembered as a refusal
			// for up to maxCachedDenial: past it, the next request asks
			// the store.
			time.Sleep(2 * maxCachedDenial)
			srv.Pause()
			defer srv.Resume()
			local := fallbackLocal.Get()
			got, d := allowN(l, &Request{IP: ip}, 3)
			require.Greater(t, fallbackLocal.Get(), local, "the local policy decided")
			assert.Zero(t, got, "the local share let through again what the store already had: %+v", d)
		})
	}
}

// TestLimiterReportsUsedLeases: a bucket's next lease call reports the
// permits of its previous lease that were used, so the store re-dates them:
// on Redis, a client held at its limit then gets the limit per window,
// where counting each leased permit until its lease's expiry plus the
// window gave it limit × window / (window + lease lifetime).
func TestLimiterReportsUsedLeases(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window, c.StoreTimeout, c.MaxLease = 1000, time.Hour, time.Second, 64
	})
	l := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{})
	ip := []byte("10.7.7.7")
	before := reportedUsed.Get()
	got, _ := allowN(l, &Request{IP: ip}, 200) // leases double while they run out: several refills
	require.Equal(t, 200, got)
	// Every leased permit taken before the bucket's last refill was
	// reported used: all 200 requests but each call's own Need permit (at
	// most 10 calls: leases double up to 64) and those taken from the
	// current lease (at most 64).
	reported := reportedUsed.Get() - before
	assert.GreaterOrEqual(t, reported, uint64(200-10-64), "used permits were not reported")
	assert.Less(t, reported, uint64(200), "more permits reported used than were taken")
}

// TestStoreLearnsWhatTheLocalShareLetThrough: what a pod let through on its
// local share while Redis was unreachable is reported with its next call
// that reaches Redis, so Redis does not then grant the window's whole budget
// on top of it (up to twice the limit in one window).
func TestStoreLearnsWhatTheLocalShareLetThrough(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []store.Algorithm{store.SlidingWindow, store.SlidingLog, store.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			// The store's deadline is the tests' default (a second), which
			// no pause of a busy machine reaches: the call after the failure
			// reaches Redis. One failed call opens the breaker.
			cfg := testLimitsConfig(func(c *Config) {
				c.Algorithm, c.IP, c.Window = alg, 10, time.Hour
				c.BreakerFailures, c.BreakerCooldown = 1, 100*time.Millisecond
			})
			pod := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{})
			ip := []byte("spent-" + alg.String())
			local := fallbackLocal.Get()
			srv.Pause()
			got, _ := allowN(pod, &Request{IP: ip}, 10)
			srv.Resume()
			require.Equal(t, 10, got, "the local share (the whole limit: one pod)")
			require.Greater(t, fallbackLocal.Get(), local, "the local policy decided")
			// Past the breaker's cooldown (and the late answers' give-backs),
			// the pod's next call reaches Redis and reports the 10.
			time.Sleep(700 * time.Millisecond)
			reported := reportedUnleased.Get()
			d := pod.Allow(context.Background(), &Request{IP: ip})
			assert.False(t, d.Allowed, "Redis granted on top of what the local share let through: %+v", d)
			assert.Greater(t, reportedUnleased.Get(), reported, "nothing reported")
			other := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{})
			got, _ = allowN(other, &Request{IP: ip}, 5)
			assert.Zero(t, got, "another pod got permits of a limit the first one used up")
		})
	}
}

// TestLocalShareGetsUnusedPermitsBack: the local share counts a lease when
// Redis grants it, and the lease's unused permits, given back to Redis, are
// given back to the share too: when Redis then fails the pod lets through
// its share less what it used, not less what it leased. The limiter's clock
// is the test's: the leases' sizes (learned from the gaps between calls)
// and their expiry do not depend on how fast a busy machine runs the test,
// and the store's deadline is long enough for any pause of one.
func TestLocalShareGetsUnusedPermitsBack(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window, c.LeaseTTL, c.MaxLease = 100, time.Hour, time.Second, 8
		c.BreakerFailures = 1 // one call waits for the paused Redis; the breaker then stays open (the clock stands)
	})
	clock := &testClock{at: time.Now()}
	pod := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{Now: clock.now})
	ip := []byte("10.9.9.9")
	got, _ := allowN(pod, &Request{IP: ip}, 8) // leases of 1, 2, 4, then 8 of which 1 is used
	require.Equal(t, 8, got)
	require.Equal(t, int64(7), pod.heldPermits(ip))
	clock.add(cfg.LeaseTTL + time.Millisecond) // the 7 expire unused
	srv.Pause()
	defer srv.Resume()
	got, _ = allowN(pod, &Request{IP: ip}, 100)
	assert.Equal(t, 100-8, got, "the local share must count the 8 used permits, not the 15 leased")
}

// testParams are the params of a limit of limit permits per window: for a
// token bucket, one that refills slowly enough to look like a window's limit
// for the length of a test step.
func testParams(alg store.Algorithm, limit int64, window time.Duration) store.Params {
	if alg == store.TokenBucket {
		return store.Params{Algorithm: store.TokenBucket, Capacity: limit, RefillRate: float64(limit) / window.Seconds()}
	}
	return store.Params{Algorithm: alg, Limit: limit, Window: window}
}

// TestRefusedRequestsPermitsRideOnTheNextCall: with Redis, the API key
// limit's permit of a request the IP limit refuses goes back with the API
// key's next lease call, not in a call of its own, and that call gets it
// back before it is granted: the key loses nothing.
func TestRefusedRequestsPermitsRideOnTheNextCall(t *testing.T) {
	srv := redistest.Start(t)
	client, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	st := &classifyingStore{Store: store.NewRedisStore(client, store.RedisStoreOptions{KeyPrefix: "t"})}
	cfg := testLimitsConfig(func(c *Config) {
		c.APIKey, c.IP, c.Window = 3, 1, time.Hour
		c.LocalFastPath = new(bool) // every permit is a store call's own, counted at once
	})
	l := newTestLimiter(t, cfg, st, Options{})
	key := []byte("rare-key")
	got, _ := allowN(l, &Request{APIKey: key, IP: []byte("10.0.0.1")}, 5)
	require.Equal(t, 1, got, "the IP limit refuses all but the first")
	assert.Zero(t, st.returns.Load(), "no call only to return a refused request's permit")
	assert.Equal(t, int64(3), st.riding.Load(), "each of the refusals but the last rode on the next call")
	got = 0
	for i := range 4 {
		if l.Allow(context.Background(), &Request{APIKey: key, IP: []byte{'y', byte('0' + i)}}).Allowed {
			got++
		}
	}
	assert.Equal(t, 2, got, "the key's budget lost nothing to the refused requests")
	assert.Zero(t, st.returns.Load())
}

// TestStartedPodCountsRecentPods: a pod started after another stopped
// sending heartbeats has never seen that one live; the store's count of
// recent heartbeats has, and the new pod holds its share as the others do.
func TestStartedPodCountsRecentPods(t *testing.T) {
	l := newTestLimiter(t, testLimitsConfig(nil), memStore(t), Options{
		LivePods: func() int { return 2 }, RecentPods: func() int { return 3 },
		HeartbeatAt: func() time.Time { return time.Now() },
	})
	live, seen := l.pods(time.Now().UnixNano())
	assert.Equal(t, int64(2), live)
	assert.Equal(t, int64(3), seen, "the stopped pod, from the store's recent heartbeats")
}
