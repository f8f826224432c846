package limit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/internal/spans"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestOutageReportsKeepTheLimit: three limiters offered ten times an IP
// limit of 50 per 500 ms, Redis paused for a second in the middle. Reports
// that date each pod's local admissions at their times (not at the resume)
// must not let the store grant more: no window of sliding_log approves more
// than the limit + 2%, and a token bucket (capacity 50, refilled 100/s)
// approves no more than its capacity plus its refill over any window.
func TestOutageReportsKeepTheLimit(t *testing.T) {
	for _, alg := range []store.Algorithm{store.SlidingLog, store.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			const limit, window = 50, 500 * time.Millisecond
			srv := redistest.Start(t)
			cfg := testLimitsConfig(func(c *Config) {
				c.IP, c.Window, c.Algorithm = limit, window, alg
				c.StoreTimeout, c.BreakerFailures, c.BreakerCooldown = 50*time.Millisecond, 2, 100*time.Millisecond
			})
			pods := threeOf(t, cfg, srv.Addr)
			approvals := offerTenTimes(pods, limit*int(time.Second/window), func(at time.Duration) {
				if at == time.Second {
					srv.Pause()
				}
				if at == 2*time.Second {
					srv.Resume()
				}
			})
			worst, _, touching := spans.Busiest(approvals, window)
			most := limit + limit*2/100 // the limit + 2%
			if alg == store.TokenBucket {
				most = (limit + limit) * 102 / 100 // a whole bucket and a window's refill
			}
			t.Logf("%s: %d approved in 3 s; busiest %v: %d decided inside it, %d touching it (at most %d)", alg, len(approvals), window, worst, touching, most)
			assert.LessOrEqual(t, worst, most, "a window approved more than the limit")
		})
	}
}

// offerTenTimes offers ten times rate per second for 3 s through pods over
// 12 workers, calls at with each elapsed whole second (1 s, 2 s), and
// returns the approvals' spans.
func offerTenTimes(pods [3]*Limiter, rate int, at func(time.Duration)) []spans.Span {
	var mu sync.Mutex
	var approvals []spans.Span
	start := time.Now()
	req := &Request{IP: []byte("10.9.9.9")}
	var wg sync.WaitGroup
	const workers = 12
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Duration(workers) * time.Second / time.Duration(10*rate))
			defer tick.Stop()
			for i := 0; time.Since(start) < 3*time.Second; i++ {
				from := time.Now()
				if pods[(w+i)%3].Allow(context.Background(), req).Allowed {
					mu.Lock()
					approvals = append(approvals, spans.Span{From: from, To: time.Now()})
					mu.Unlock()
				}
				<-tick.C
			}
		}()
	}
	for s := time.Second; s < 3*time.Second; s += time.Second {
		time.Sleep(time.Until(start.Add(s)))
		at(s)
	}
	wg.Wait()
	return approvals
}

// outagePod is a pod of pods (LivePods) on a store that can be taken
// down (st.down), deciding a rule of limit a minute for req, whose last
// heartbeat reached the store at beat (HeartbeatTTL 1 s), and whose first
// request the store answered.
type outagePod struct {
	clock *atomic.Int64
	now   func() time.Time
	st    *switchStore
	l     *Limiter
	req   *Request
	beat  time.Time
}

// outageRule is the configuration and the catalog of the outage tests: a
// breaker that opens on the first failure, leases of one permit, and a
// rule of limit a minute (sliding_window) for tenant free on resource r.
func outageRule(t *testing.T, limit int64) (Config, *catalog.Catalog) {
	cfg := testLimitsConfig(func(c *Config) { c.BreakerFailures, c.MaxLease = 1, 1 })
	rule := catalog.Rule{Tenant: "free", Resource: "r", Algorithm: store.SlidingWindow, Limit: limit, Window: confutil.Duration(time.Minute)}
	return cfg, testCatalog(t, rule)
}

func newOutagePod(t *testing.T, limit int64, pods int) *outagePod {
	p := &outagePod{req: &Request{Tenant: "free", Plan: "FREE", Resource: "r"}}
	p.clock, p.now, _, p.st = clockedStore(t)
	cfg, cat := outageRule(t, limit)
	p.beat = p.now() // its last heartbeat before the outage
	p.l = newTestLimiter(t, cfg, p.st, Options{Now: p.now, Catalog: cat, LivePods: func() int { return pods },
		HeartbeatAt: func() time.Time { return p.beat }, HeartbeatTTL: time.Second})
	first, _ := allowN(p.l, p.req, 1)
	require.Equal(t, 1, first, "answered by the store")
	return p
}

// TestUncontestedKeyDecidedAloneUntilTheOthersRead: back from an outage, a
// pod decides a key that was not contested alone, on its share, until the
// other pods have read its heartbeat (StoreReachable's read): until then
// they hold its share, and the store would count twice what it reported or
// granted this pod. Then the next call reports what it let through, and the
// store counts it.
func TestUncontestedKeyDecidedAloneUntilTheOthersRead(t *testing.T) {
	const limit, alone, first = 30, 6, 1
	p := newOutagePod(t, limit, 1)
	clock, now, st, l, req := p.clock, p.now, p.st, p.l, p.req

	st.down.Store(true)
	own, _ := allowN(l, req, alone)
	require.Equal(t, alone, own, "let through alone")
	clock.Add(int64(2 * time.Second)) // an outage longer than HeartbeatTTL
	st.down.Store(false)
	l.StoreReachable(time.Second)
	reported, held := reportedUnleased.Get(), aloneWhileHeld.Get()
	got, _ := allowN(l, req, 1)
	require.Equal(t, 1, got)
	assert.Zero(t, reportedUnleased.Get()-reported, "reported before the others read the heartbeat")
	assert.Equal(t, uint64(1), aloneWhileHeld.Get()-held, "decided alone")

	clock.Add(int64(2 * time.Second))
	p.beat = now() // its heartbeats arrive again
	got, _ = allowN(l, req, limit)
	assert.Equal(t, uint64(alone+1), reportedUnleased.Get()-reported, "reported once they have")
	assert.Equal(t, limit-first-alone-1, got, "the store counts them")
}

// TestKeyRefusedAloneReportedWhenBack: a key the store never refused, whose
// clients asked a pod for more than its share while the pod decided alone
// (its calls failed), is not decided alone when the pod is back before the
// others read its heartbeat: its next call reports what the pod let
// through. Decided alone, it was reported after they had read the
// heartbeat and stopped holding the pod's share, which they could then
// take again (62 in a second for 51, over 4 pods, a slow store and then a
// pod cut off).
func TestKeyRefusedAloneReportedWhenBack(t *testing.T) {
	const limit, pods = 30, 3
	p := newOutagePod(t, limit, pods)
	clock, st, l, req := p.clock, p.st, p.l, p.req

	st.down.Store(true)
	own, last := allowN(l, req, 2*limit/pods)
	require.Less(t, own, 2*limit/pods, "the share refused none")
	require.False(t, last.Allowed)
	clock.Add(int64(2 * time.Second)) // an outage longer than HeartbeatTTL
	st.down.Store(false)
	l.StoreReachable(time.Second)
	reported, held := reportedUnleased.Get(), aloneWhileHeld.Get()
	allowN(l, req, 1)
	assert.Zero(t, aloneWhileHeld.Get()-held, "decided alone")
	assert.Equal(t, uint64(own), reportedUnleased.Get()-reported, "what it let through alone, reported")
}

// TestContestedShareComesBackAWindowAfterTheHold: a pod cut off from the
// store grants nothing of a contested key (the store refused it) until the
// others have held its share for a window and a lease: the window before
// they held it may hold their grants of the whole limit, late in it as well
// as early (a share ramped over that window let 52 through in a second for
// 51, over 6 pods). Then it grants its share.
func TestContestedShareComesBackAWindowAfterTheHold(t *testing.T) {
	const limit, pods, notice = 30, 3, 2 * time.Second
	const window = 10 * time.Second
	clock, now, mem, st := clockedStore(t)
	cfg := testLimitsConfig(func(c *Config) { c.BreakerFailures, c.MaxLease = 1, 1 })
	rule := catalog.Rule{Tenant: "free", Resource: "r", Algorithm: store.SlidingWindow, Limit: limit, Window: confutil.Duration(window)}
	beat := now() // its last heartbeat before it was cut off
	livePods := func() int { return pods }
	opts := func() Options {
		return Options{Now: now, Catalog: testCatalog(t, rule), LivePods: livePods, RecentPods: livePods,
			PeerNotice: notice, HeartbeatAt: func() time.Time { return beat }, HeartbeatTTL: time.Second}
	}
	other := newTestLimiter(t, cfg, &switchStore{Store: mem}, opts())
	l := newTestLimiter(t, cfg, st, opts())
	req := &Request{Tenant: "free", Plan: "FREE", Resource: "r"}
	took, _ := allowN(other, req, limit-1)
	require.Equal(t, limit-1, took, "the other pod takes all but one")
	got, _ := allowN(l, req, 2)
	require.Equal(t, 1, got, "the store refuses the key: it is contested")

	st.down.Store(true)
	for _, at := range []time.Duration{0, notice, notice + window/2, notice + window} {
		clock.Store(beat.UnixNano() + int64(at))
		got, _ = allowN(l, req, 3)
		assert.Zero(t, got, "granted alone %s after its last heartbeat", at)
	}
	clock.Store(beat.UnixNano() + int64(notice+window+time.Second))
	got, _ = allowN(l, req, limit)
	assert.Equal(t, limit/pods, got, "its share, once the others' grants from before the hold have left")
}

// TestUnrefusedKeyTakesItsShareAlone: a pod whose calls fail while the
// others reach the store lets its share of a key through alone when the
// store had not refused the key on it (it never answered it, or answered
// it under the limit): nothing tells the pod that the key's clients ask
// more than the limit. The others, answered, take the whole limit, so the
// window holds the limit plus that pod's share, the bound docs/leases.md
// gives such a key, and no more however often its clients ask.
func TestUnrefusedKeyTakesItsShareAlone(t *testing.T) {
	const limit, pods, share = 30, 3, 10
	for _, answered := range []bool{false, true} {
		t.Run(map[bool]string{false: "never answered", true: "answered under the limit"}[answered], func(t *testing.T) {
			clock, now, mem, cut := clockedStore(t)
			cfg, cat := outageRule(t, limit)
			pod := func(st store.Store) *Limiter {
				return newTestLimiter(t, cfg, st, Options{Now: now, Catalog: cat, LivePods: func() int { return pods }})
			}
			alone, other := pod(cut), pod(&switchStore{Store: mem})
			req := &Request{Tenant: "free", Plan: "FREE", Resource: "r"}
			first := 0
			if answered {
				first, _ = allowN(alone, req, 1)
				require.Equal(t, 1, first, "answered by the store")
			}
			cut.down.Store(true)
			others, _ := allowN(other, req, limit)
			require.Equal(t, limit-first, others, "the others took the rest of the limit")
			unanswered := fallbackUnanswered.Get()
			var own int
			for range 5 {
				n, _ := allowN(alone, req, limit)
				own += n
				clock.Add(int64(time.Second))
			}
			t.Logf("first %d, the others %d, alone %d: %d in the window", first, others, own, first+others+own)
			assert.Positive(t, own, "let nothing through alone")
			assert.LessOrEqual(t, first+own, share, "more than its share")
			assert.LessOrEqual(t, first+others+own, limit+share, "the window")
			if answered {
				assert.Equal(t, unanswered, fallbackUnanswered.Get(), "grants on a key the store answered counted as unanswered")
			} else {
				assert.Equal(t, unanswered+uint64(own), fallbackUnanswered.Get(), "grants on a key the store never answered")
			}
		})
	}
}

// limitsSeen is a store that remembers the limit of each call it gets.
type limitsSeen struct {
	store.Store
	mu     sync.Mutex
	limits []int64
}

func (s *limitsSeen) Lease(ctx context.Context, req *store.LeaseRequest) (store.LeaseResult, error) {
	s.mu.Lock()
	s.limits = append(s.limits, req.Params.Limit)
	s.mu.Unlock()
	return s.Store.Lease(ctx, req)
}

// take returns the limits remembered since the last take, and forgets
// them (a call of the store may run on a worker of its own).
func (s *limitsSeen) take() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.limits
	s.limits = nil
	return got
}

// TestBlindPodHoldsTheOthersShares: a pod whose heartbeats have failed
// for longer than the others' may have before they decide alone (a
// heartbeat interval short of HeartbeatTTL) sends the calls of a
// contested key with the limit lowered by every other pod's share: the
// store's node of the heartbeats may be down for every pod while the
// keys' nodes answer, and then none reads that the others stopped. A key
// of 30 a 10 s window over 3 pods, taken 15 and 15 five seconds apart
// and refused then: once the first 15 have left (2 s past the window: a
// lease counts until its expiry plus the window), a pod whose heartbeat
// is fresh gets 15 more, a blind one none (the store's limit for it is
// its share, 10, and 15 are counted). A key that was not contested keeps
// its whole limit; the limits the store got are checked, and that the
// blind calls are counted.
func TestBlindPodHoldsTheOthersShares(t *testing.T) {
	const limit, pods, half = 30, 3, 15
	const ttl, every, window = 3 * time.Second, 500 * time.Millisecond, 10 * time.Second
	run := func(t *testing.T, beatAge time.Duration) (granted int, sent []int64) {
		clock, now, mem, _ := clockedStore(t)
		st := &limitsSeen{Store: mem}
		cfg := testLimitsConfig(func(c *Config) { c.MaxLease = 1 })
		rules := []catalog.Rule{
			{Tenant: "free", Resource: "r", Algorithm: store.SlidingLog, Limit: limit, Window: confutil.Duration(window)},
			{Tenant: "gold", Resource: "r", Algorithm: store.SlidingLog, Limit: limit, Window: confutil.Duration(window)},
		}
		start := now()
		beat := start
		livePods := func() int { return pods }
		l := newTestLimiter(t, cfg, st, Options{Now: now, Catalog: testCatalog(t, rules...), LivePods: livePods, RecentPods: livePods,
			HeartbeatAt: func() time.Time { return beat }, HeartbeatTTL: ttl, HeartbeatEvery: every})
		req := &Request{Tenant: "free", Plan: "FREE", Resource: "r"}
		got, _ := allowN(l, req, half)
		require.Equal(t, half, got)
		clock.Add(int64(window / 2))
		beat = now()
		got, _ = allowN(l, req, half+1)
		require.Equal(t, half, got, "the store refuses the key: it is contested")
		clock.Store(start.Add(window + 2*time.Second).UnixNano())
		beat = now().Add(-beatAge)
		holds := blindHolds.Get()
		st.take()
		granted, _ = allowN(l, req, half)
		gold, _ := allowN(l, &Request{Tenant: "gold", Plan: "FREE", Resource: "r"}, 1)
		require.Equal(t, 1, gold, "a key that was not contested")
		if beatAge > ttl-every { // (the process's counter: not asserted still when fresh)
			assert.Positive(t, blindHolds.Get()-holds, "counted")
		}
		return granted, st.take()
	}
	t.Run("fresh", func(t *testing.T) {
		granted, sent := run(t, ttl-every-100*time.Millisecond)
		assert.Equal(t, half, granted, "the first 15 have left")
		for _, l := range sent {
			assert.Equal(t, int64(limit), l, "the whole limit")
		}
	})
	t.Run("blind", func(t *testing.T) {
		granted, sent := run(t, ttl-every+100*time.Millisecond)
		assert.Zero(t, granted, "its share, 10, and 15 counted")
		require.NotEmpty(t, sent)
		assert.Equal(t, int64(limit-(pods-1)*limit/pods), sent[0], "the contested key: its share alone")
		assert.Equal(t, int64(limit), sent[len(sent)-1], "the key that was not contested: the whole limit")
	})
}

// TestBlindNotWhileTheHeartbeatsWork: a pod is blind a heartbeat interval
// short of HeartbeatTTL after its last heartbeat, or for a key a window
// and a lease after it if sooner (its count of the live pods may be stale
// by then), but never while its heartbeat is under two intervals old,
// which it is while the exchanges work, however short pressure_ttl, the
// window or the lease.
func TestBlindNotWhileTheHeartbeatsWork(t *testing.T) {
	const hour = time.Hour
	for _, tc := range []struct {
		ttl, every, window, lease, age time.Duration
		blind                          bool
	}{
		{3 * time.Second, 500 * time.Millisecond, hour, time.Second, 2400 * time.Millisecond, false},
		{3 * time.Second, 500 * time.Millisecond, hour, time.Second, 2600 * time.Millisecond, true},
		{600 * time.Millisecond, 500 * time.Millisecond, hour, time.Second, 700 * time.Millisecond, false},
		{600 * time.Millisecond, 500 * time.Millisecond, hour, time.Second, 1100 * time.Millisecond, true},
		// A window of a second and a lease of 200 ms: from 1.2 s.
		{3 * time.Second, 500 * time.Millisecond, time.Second, 200 * time.Millisecond, 1100 * time.Millisecond, false},
		{3 * time.Second, 500 * time.Millisecond, time.Second, 200 * time.Millisecond, 1300 * time.Millisecond, true},
		// Shorter than two intervals: from two intervals.
		{3 * time.Second, 500 * time.Millisecond, 100 * time.Millisecond, 50 * time.Millisecond, 900 * time.Millisecond, false},
		{3 * time.Second, 500 * time.Millisecond, 100 * time.Millisecond, 50 * time.Millisecond, 1100 * time.Millisecond, true},
	} {
		_, now, mem, _ := clockedStore(t)
		beat := now().Add(-tc.age)
		l := newTestLimiter(t, testLimitsConfig(nil), mem, Options{Now: now,
			HeartbeatAt: func() time.Time { return beat }, HeartbeatTTL: tc.ttl, HeartbeatEvery: tc.every})
		s := &spec{window: tc.window, ttl: tc.lease}
		assert.Equal(t, tc.blind, l.blind(s, now().UnixNano()), "pressure_ttl %v, every %v, window %v, lease %v, heartbeat %v old", tc.ttl, tc.every, tc.window, tc.lease, tc.age)
	}
}
