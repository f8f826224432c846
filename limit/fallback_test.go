package limit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// threeOf returns three limiters on one Redis that each count three live
// pods, as three gateways would.
func threeOf(t *testing.T, cfg Config, addr string) [3]*Limiter {
	var pods [3]*Limiter
	for i := range pods {
		pods[i] = newTestLimiter(t, cfg, newRedisStore(t, addr), Options{LivePods: func() int { return 3 }})
	}
	return pods
}

// TestFallbackKeepsToWhatTheStoreLeft: a pod whose last store answer said
// the window's budget was gone (the other pods took it) lets nothing through
// on its local share when the store then fails, though its share has room:
// the failure path hands out no more than the store would have.
func TestFallbackKeepsToWhatTheStoreLeft(t *testing.T) {
	srv := redistest.Start(t)
	// The store's deadline is the default of the tests (a second): the counts
	// before the failure are the store's, whatever the machine's load.
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window, c.BreakerCooldown = 30, time.Hour, 50*time.Millisecond
		c.LocalFastPath = new(bool) // one permit per call: the counts are exact
	})
	pods := threeOf(t, cfg, srv.Addr)
	ip := []byte("10.7.7.7")
	a, _ := allowN(pods[0], &Request{IP: ip}, 1)
	b, _ := allowN(pods[1], &Request{IP: ip}, 20)
	c, _ := allowN(pods[2], &Request{IP: ip}, 8)
	d, last := allowN(pods[0], &Request{IP: ip}, 2) // the last answer: nothing left
	require.Equal(t, 30, a+b+c+d, "the store's budget, used up")
	require.False(t, last.Allowed)
	time.Sleep(2 * maxCachedDenial) // past the cached refusal: the next request asks the store

	srv.Stop() // refused connections: each call fails at once
	local := fallbackLocal.Get()
	got, _ := allowN(pods[0], &Request{IP: ip}, 10)
	require.Greater(t, fallbackLocal.Get(), local, "the local policy decided")
	assert.Zero(t, got, "pod A let through its local share on top of a budget the store had granted in full")
}

// TestRecoveredPodKeepsToItsShare: for a window after a pod let permits
// through on its local share, what the store grants it stays within that
// share too: the other pods' reports of their own local decisions may reach
// the store after this pod's call, and the store's remaining budget would
// hold them.
func TestRecoveredPodKeepsToItsShare(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window, c.StoreTimeout, c.BreakerCooldown = 30, time.Hour, 100*time.Millisecond, 50*time.Millisecond
	})
	pods := threeOf(t, cfg, srv.Addr)
	ip := []byte("10.8.8.8")
	srv.Pause()
	got, _ := allowN(pods[0], &Request{IP: ip}, 15)
	srv.Resume()
	require.Equal(t, 10, got, "the local share: a third of 30")
	time.Sleep(600 * time.Millisecond) // past the cooldown and the late answers
	trims := recoveryTrims.Get()
	got, _ = allowN(pods[0], &Request{IP: ip}, 10)
	assert.Zero(t, got, "pod A got more than its share from the store in the window after it decided alone")
	assert.Greater(t, recoveryTrims.Get(), trims, "the grants were given back")
	// The other pods are not held back: their share has room.
	got, _ = allowN(pods[1], &Request{IP: ip}, 10)
	assert.Equal(t, 10, got)
}

// TestLateCallTakesNoUnleased: a call that Redis runs after its RunWithin (it
// was paused) counts none of the permits it reports as let through locally:
// run late, it would date them late; its caller reports them again.
func TestLateCallTakesNoUnleased(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []store.Algorithm{store.SlidingWindow, store.SlidingLog, store.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			st := newRedisStore(t, srv.Addr)
			p := store.Params{Algorithm: alg, Limit: 100, Window: time.Hour, Capacity: 100, RefillRate: 0}
			key := []byte("{late-spent-" + alg.String() + "}")
			ctx := context.Background()
			_, err := st.Lease(ctx, &store.LeaseRequest{Key: key, Params: p, Want: 1}) // learns Redis' clock
			require.NoError(t, err)
			srv.Pause()
			done := make(chan error, 1)
			go func() {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err := st.Lease(cctx, &store.LeaseRequest{Key: key, Params: p, Want: 1, Unleased: 50, RunWithin: 20 * time.Millisecond})
				done <- err
			}()
			time.Sleep(200 * time.Millisecond)
			srv.Resume()
			assert.ErrorIs(t, <-done, store.ErrStoreLate)
			res, err := st.Lease(ctx, &store.LeaseRequest{Key: key, Params: p, Want: 1})
			require.NoError(t, err)
			assert.Equal(t, int64(98), res.Remaining, "the late call's spent permits were counted")
		})
	}
}

// TestUnleasedPartsKeepTheirTimes: what the local policy let through over a
// failure longer than a window goes to the store as the last window's
// permits, in parts of an eighth of the window (for a token bucket, of its
// refill time) each dated by its last permit: none older than the window
// by more than a part, none dated earlier than it was let through, for
// every algorithm; and any number of calls that fail put them back with the
// same dates.
func TestUnleasedPartsKeepTheirTimes(t *testing.T) {
	for _, p := range perSecond(100) {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			s := &spec{params: p}
			b := &bucket{}
			start := int64(1_000_000) * int64(time.Second)
			step := int64(10 * time.Millisecond)
			var at []int64
			for i := range 300 { // 3 s at 100/s
				now := start + int64(i)*step
				b.addUnleased(1, now, unleasedWidth(&s.params), 0)
				at = append(at, now)
			}
			now := at[len(at)-1] + step
			spent, ago, before := b.unleasedParts(now, s)
			checkUnleasedParts(t, at, now, spent, ago, before)
			dates := partDates(now, spent, ago, before)
			for fails := range 20 { // calls that fail, 50 ms apart
				b.reportLater(now, &s.params, spent, ago, before)
				now += int64(50 * time.Millisecond)
				spent2, ago2, before2 := b.unleasedParts(now, s)
				for date, n := range partDates(now, spent2, ago2, before2) {
					require.Equal(t, dates[date], n, "part at %d re-dated by failed call %d", date, fails+1)
				}
				spent, ago, before = spent2, ago2, before2
				assert.LessOrEqual(t, reported(spent, before), inWindow(at, now)+partSlack, "permits that left the window still reported after failed call %d", fails+1)
			}
		})
	}
}

// perSecond is a limit of n a second in each algorithm whose permits a pod
// reports in parts by time: the sliding ones, and a token bucket refilled
// whole in a second.
func perSecond(n int64) []store.Params {
	return []store.Params{
		{Algorithm: store.SlidingWindow, Limit: n, Window: time.Second},
		{Algorithm: store.SlidingLog, Limit: n, Window: time.Second},
		{Algorithm: store.TokenBucket, Capacity: n, RefillRate: float64(n)},
	}
}

// reported is the permits a report of unleasedParts holds.
func reported(spent int64, before [store.UnleasedParts]store.UnleasedPart) int64 {
	return (&report{unleased: spent, unleasedBefore: before}).unleasedTotal()
}

// partSlack is the most permits older than the window that a report of
// TestUnleasedPartsKeepTheirTimes's 100 a second may hold: those of one part
// (an eighth of a second), which is dated by its last permit.
const partSlack = 100/store.UnleasedParts + 1

// checkUnleasedParts checks a report made at now of the permits let through
// at times at: every permit of the last window is in it, at most one part
// more, and no part is dated earlier than its permits.
func checkUnleasedParts(t *testing.T, at []int64, now, spent int64, ago time.Duration, before [store.UnleasedParts]store.UnleasedPart) {
	t.Helper()
	width := int64(time.Second) / store.UnleasedParts
	total := spent
	for _, p := range before {
		total += p.N
		date, n := now-int64(p.Ago), int64(0)
		for _, a := range at {
			if a <= date && a > date-width {
				n++
			}
		}
		assert.LessOrEqual(t, p.N, n, "part %+v dated earlier than its permits", p)
	}
	assert.Equal(t, time.Duration(now-at[len(at)-1]), ago)
	assert.GreaterOrEqual(t, total, inWindow(at, now), "permits of the last window forgotten")
	assert.LessOrEqual(t, total, inWindow(at, now)+partSlack, "permits older than the window reported (over a part more)")
}

// TestUnleasedBurstsKeepTheirTimes: clients that send in bursts (here 28
// requests every 200 ms, 70% of a 200 a second limit) get every burst
// reported at its own time after a long failure, for every algorithm: a
// part is dated by its last permit, and a part is narrower than the gap
// between bursts, so the report holds exactly the window's bursts, not one
// more that left it (which, with the leases asked for at the resume, would
// refuse the client under its limit).
func TestUnleasedBurstsKeepTheirTimes(t *testing.T) {
	for _, p := range perSecond(200) {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			for phase := range 20 { // where the report falls between bursts
				s := &spec{params: p}
				b := &bucket{}
				start := int64(1_000_000)*int64(time.Second) + int64(phase)*int64(10*time.Millisecond)
				var at []int64
				for burst := range 50 { // 10 s
					now := start + int64(burst)*int64(200*time.Millisecond)
					for range 28 {
						b.addUnleased(1, now, unleasedWidth(&s.params), 0)
						at = append(at, now)
					}
				}
				now := at[len(at)-1] + int64(phase+1)*int64(9*time.Millisecond)
				spent, _, before := b.unleasedParts(now, s)
				require.Equal(t, inWindow(at, now), reported(spent, before), "report at %v after the last burst", time.Duration(now-at[len(at)-1]))
			}
		})
	}
}

// inWindow counts the times of at within the second before now.
func inWindow(at []int64, now int64) int64 {
	n := int64(0)
	for _, a := range at {
		if a > now-int64(time.Second) {
			n++
		}
	}
	return n
}

// partDates are the times a report made at now dates its parts at, with
// their permits (parts that left the window by now are dropped: the
// dates of the rest stay).
func partDates(now, spent int64, ago time.Duration, before [store.UnleasedParts]store.UnleasedPart) map[int64]int64 {
	out := map[int64]int64{now - int64(ago): spent}
	for _, p := range before {
		if p.N > 0 {
			out[now-int64(p.Ago)] += p.N
		}
	}
	return out
}

// TestFallbackWaitsForTheBudgetToLeave: the store granted a window's whole
// budget in a bunch (at the end of a window, when the clients came), then
// failed for good (the breaker opens). The budget comes back to the local
// share as those permits leave the window, a window after they were used:
// none before the first of them leaves, all once the last has, and in
// between (the store tells only the two ends) as if they had been used at
// an even pace. The bounds are taken from the test's own clock readings
// around each grant, which hold whatever the scheduling: a grant is used no
// earlier than its call was made. The store's deadline is long enough for
// any pause of a busy machine: the grants are the store's, not the fallback's.
func TestFallbackWaitsForTheBudgetToLeave(t *testing.T) {
	srv := redistest.Start(t)
	const limit, window = 30, time.Second
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window = limit, window
		c.BreakerFailures, c.BreakerCooldown = 2, time.Hour // open for the rest of the test
		c.LocalFastPath = new(bool)                         // one permit per call: the counts are exact
	})
	pods := threeOf(t, cfg, srv.Addr)
	ip := []byte("10.9.9.9")
	var first, last time.Time // the starts of the first and the last grant's calls
	take := func(l *Limiter, n int) {
		for range n {
			from := time.Now()
			d := l.Allow(context.Background(), &Request{IP: ip})
			require.True(t, d.Allowed, "the store's budget has room")
			if first.IsZero() {
				first = from
			}
			last = from
		}
	}
	take(pods[1], 14)
	take(pods[2], 14)
	take(pods[0], limit-28) // pod A's last answer: nothing left
	answered := time.Now()

	srv.Stop() // refused connections: the breaker opens at once, not after two deadlines
	// freed bounds the part of the budget back by at: the permits leave
	// between first+window and last+window at the latest (the store dated
	// them after the calls started).
	freed := func(at time.Time) float64 {
		return min(max(float64(at.Sub(first.Add(window)))/float64(last.Sub(first)), 0), 1)
	}
	var got []time.Time
	for time.Since(answered) < window+window/2 || len(got) == 0 && time.Since(answered) < 10*window {
		if d := pods[0].Allow(context.Background(), &Request{IP: ip}); d.Allowed {
			at := time.Now()
			got = append(got, at)
			assert.False(t, at.Before(first.Add(window)), "let through %v after the last answer, before any of the budget had left",
				at.Sub(answered).Round(time.Millisecond))
			assert.LessOrEqual(t, float64(len(got)), float64(limit/3)*freed(at)+1e-9,
				"%d let through %v after the last answer, more than a third of the budget had left by then",
				len(got), at.Sub(answered).Round(time.Millisecond))
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.NotEmpty(t, got, "once the budget has left, the local share lets clients through")
	t.Logf("budget used in %v; the pod let through %d in the %v after the last answer, the first after %v",
		last.Sub(first).Round(time.Millisecond), len(got), time.Since(answered).Round(time.Millisecond), got[0].Sub(answered).Round(time.Millisecond))
}

// TestUnleasedSlotsFollowAChangedWindow: a key's window changes (a rule
// written, a reload) while it holds permits let through alone: they move to
// slots of the new width, none lost, none dated earlier than it was used.
func TestUnleasedSlotsFollowAChangedWindow(t *testing.T) {
	before := &spec{params: store.Params{Algorithm: store.SlidingWindow, Limit: 100, Window: time.Second}}
	after := &spec{params: store.Params{Algorithm: store.SlidingWindow, Limit: 100, Window: 10 * time.Second}}
	b := &bucket{}
	start := int64(1_000_000) * int64(time.Second)
	step := int64(10 * time.Millisecond)
	for i := range 100 { // the last second at 100/s
		b.addUnleased(1, start+int64(i)*step, unleasedWidth(&before.params), 0)
	}
	now := start + 100*step
	b.addUnleased(1, now, unleasedWidth(&after.params), 0)
	spent, ago, parts := b.unleasedParts(now, after)
	total := spent
	for _, p := range parts {
		total += p.N
		assert.GreaterOrEqual(t, now-int64(p.Ago), start, "part %+v dated before the first permit", p)
	}
	assert.Equal(t, int64(101), total, "permits lost when the window changed")
	assert.Zero(t, ago)
}

// TestFailedProbeSharesLikeAnOpenBreaker: a client at 70% of its limit,
// through three pods, is never refused while Redis is paused: neither the
// calls that time
// out before the breaker opens, nor the half-open probes that fail every
// cooldown, are decided with less room than the calls the open breaker
// skips.
func TestFailedProbeSharesLikeAnOpenBreaker(t *testing.T) {
	srv := redistest.Start(t)
	const limit = 60 // a share of 20 per pod
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window, c.StoreTimeout = limit, time.Second, 50*time.Millisecond
		c.BreakerFailures, c.BreakerCooldown = 2, 100*time.Millisecond
	})
	pods := threeOf(t, cfg, srv.Addr)
	ip := []byte("10.6.6.6")
	send := func(d time.Duration) (refused int) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			for _, p := range pods {
				if !p.Allow(context.Background(), &Request{IP: ip}).Allowed {
					refused++
				}
			}
			time.Sleep(70 * time.Millisecond) // 14 a second a pod: 70% of the share
		}
		return refused
	}
	require.Zero(t, send(time.Second), "refused with the store answering")
	srv.Pause()
	defer srv.Resume()
	probes := storeCallsTimeout.Get()
	refused := send(3 * time.Second)
	t.Logf("store calls timed out during the pause (the first ones and the probes): %d", storeCallsTimeout.Get()-probes)
	assert.Zero(t, refused, "a client at 70% of its limit refused while Redis was paused")
}

// TestTrimmedGrantRefusedUntilTheShareFrees: in the window after a pod
// decided alone, a store grant that its share has no room for is refused,
// and the refusal is remembered only until the share frees a permit: a
// client that its share has room for again is served at once, not refused
// for the rest of the cached refusal (a steady tenant at 70% of its limit
// over 6 pods, after a stretch of slow store calls).
func TestTrimmedGrantRefusedUntilTheShareFrees(t *testing.T) {
	clock, now, _, st := clockedStore(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window, c.StoreTimeout = 30, time.Second, 50*time.Millisecond
		c.BreakerFailures, c.BreakerCooldown = 1, 50*time.Millisecond
		c.LocalFastPath = new(bool) // one permit per call
	})
	l := newTestLimiter(t, cfg, st, Options{Now: now, LivePods: func() int { return 3 }})
	req := &Request{IP: []byte("10.6.6.7")}
	st.down.Store(true)
	got, _ := allowN(l, req, 5)
	clock.Add(int64(400 * time.Millisecond))
	more, _ := allowN(l, req, 5)
	require.Equal(t, 10, got+more, "the local share: a third of 30")

	// Back, a little before the first five leave the share (a window and
	// the share's slack after they were let through): the store grants,
	// the share does not.
	st.down.Store(false)
	clock.Add(int64(630 * time.Millisecond))
	trims := recoveryTrims.Get()
	d := l.Allow(context.Background(), req)
	require.False(t, d.Allowed, "the store's grant kept to the share")
	require.Greater(t, recoveryTrims.Get(), trims)
	require.Less(t, d.RetryAfter, maxCachedDenial, "the share frees a permit sooner than the longest cached refusal")

	clock.Add(int64(d.RetryAfter))
	assert.True(t, l.Allow(context.Background(), req).Allowed, "refused after the share freed a permit")
}
