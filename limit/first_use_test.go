package limit

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestFirstUseTakesNoStoreCall: on Redis, a key's first request in a
// window under a limit of a thousand a pod or more makes no store call and
// keeps no bucket; its second asks the store, which has kept a permit for
// the pod. A limit under a thousand a pod asks the store from the first,
// and so does every key with limits.first_uses off.
func TestFirstUseTakesNoStoreCall(t *testing.T) {
	for _, c := range []struct {
		limit int64
		first bool
		off   bool // limits.first_uses: false
	}{{1_000_000, true, false}, {2999, false, false}, {1_000_000, false, true}} {
		t.Run(fmt.Sprintf("%d,off=%v", c.limit, c.off), func(t *testing.T) {
			srv := redistest.Start(t)
			st := newRedisStore(t, srv.Addr)
			cl, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
			require.NoError(t, err)
			t.Cleanup(cl.Close)
			cfg := testLimitsConfig(func(cfg *Config) {
				cfg.IP, cfg.Window = c.limit, time.Minute
				if c.off {
					cfg.FirstUses = new(bool)
				}
			})
			l := newTestLimiter(t, cfg, st, Options{LivePods: func() int { return 3 }})
			const keys = 100
			ask := func() {
				for i := range keys {
					d := l.Allow(context.Background(), &Request{IP: []byte("10.8.0." + strconv.Itoa(i))})
					require.True(t, d.Allowed)
					require.LessOrEqual(t, d.Remaining, c.limit-1)
				}
			}
			ask()
			if !c.first {
				assert.EqualValues(t, keys, st.calls.Load())
				return
			}
			assert.Zero(t, st.calls.Load(), "first uses asked the store")
			assert.Zero(t, l.table.len(), "first uses kept a bucket")
			n, err := cl.Do(context.Background(), cl.B().Dbsize().Build()).AsInt64()
			require.NoError(t, err)
			assert.Zero(t, n, "first uses wrote to Redis")
			ask()
			assert.EqualValues(t, keys, st.calls.Load(), "a key's second request in the window did not ask the store")
		})
	}
}

// TestFirstUsesAndTheStoreGrantTheLimit: three pods on one Redis, each
// with its own client, offer one key three times its limit: the store
// grants the limit less the three permits it keeps, each pod lets one
// request through on its own, and together they let through no more than
// the limit.
func TestFirstUsesAndTheStoreGrantTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	const limit, pods = 3000, 3
	var ls []*Limiter
	for range pods {
		cfg := testLimitsConfig(func(cfg *Config) { cfg.IP, cfg.Window = limit, time.Minute })
		ls = append(ls, newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{LivePods: func() int { return pods }}))
	}
	before := firstUseGrants.Get()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for _, l := range ls {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, _ := allowN(l, &Request{IP: []byte("10.8.1.1")}, limit)
				allowed.Add(int64(n))
			}()
		}
	}
	wg.Wait()
	assert.EqualValues(t, pods, firstUseGrants.Get()-before, "each pod's first use")
	// At most the limit (3,003 without the store's reservation); a lease
	// that expired unused after a pod's last request, on a busy machine,
	// stays counted, so a little less may pass.
	assert.LessOrEqual(t, allowed.Load(), int64(limit))
	assert.GreaterOrEqual(t, allowed.Load(), int64(limit-limit/100))
}

// TestFirstUseOncePerWindow: a pod lets a key through on its reserved
// permit once in a window: after it, the key asks the store, even once
// its bucket is gone; a window later it may again.
func TestFirstUseOncePerWindow(t *testing.T) {
	clock, now, _, sw := clockedStore(t)
	st := &countingStore{Store: sw}
	cfg := testLimitsConfig(func(cfg *Config) { cfg.IP, cfg.Window = 10_000, time.Minute })
	l := newTestLimiter(t, cfg, st, Options{Now: now, LivePods: func() int { return 1 }})
	req := &Request{IP: []byte("10.8.2.1")}
	ask := func() { require.True(t, l.Allow(context.Background(), req).Allowed) }
	ask()
	require.Zero(t, st.calls.Load())
	ask()
	require.EqualValues(t, 1, st.calls.Load())
	clock.Add(int64(1500 * time.Millisecond))
	l.sweep() // the slight bucket goes
	require.Zero(t, l.table.len())
	ask()
	require.EqualValues(t, 2, st.calls.Load(), "a second first use in the window")
	clock.Add(int64(1500 * time.Millisecond))
	l.sweep()
	clock.Add(int64(2*time.Minute + time.Second))
	ask()
	assert.EqualValues(t, 2, st.calls.Load(), "no first use a window later")
}

// TestFirstUsesKeepTheShareExact: a pod whose store fails decides on its
// share less the permit its first use took: one pod, a limit of 1,000,
// lets through 1,000 in the window, the first use among them.
func TestFirstUsesKeepTheShareExact(t *testing.T) {
	_, now, _, sw := clockedStore(t)
	cfg := testLimitsConfig(func(cfg *Config) {
		cfg.IP, cfg.Window = 1000, time.Minute
		cfg.BreakerFailures = 1
	})
	l := newTestLimiter(t, cfg, sw, Options{Now: now, LivePods: func() int { return 1 }})
	req := &Request{IP: []byte("10.8.3.1")}
	require.True(t, l.Allow(context.Background(), req).Allowed)
	sw.down.Store(true)
	alone, _ := allowN(l, req, 3000)
	assert.Equal(t, 999, alone)
}

// TestUseFilterClaimsOnce: of concurrent claims of one key one succeeds;
// distinct keys far beyond the first generation's size are claimed (a
// false positive in a few hundred at most) as the filter grows, within its
// bound; a key stays claimed for a window at least, then may be again.
func TestUseFilterClaimsOnce(t *testing.T) {
	f := &useFilter{window: int64(time.Minute)}
	at := int64(time.Hour)
	const keys = 5000
	var won atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				if f.claim(uint64(k)*0x9E3779B97F4A7C15, at) {
					won.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, won.Load(), int64(keys))
	assert.GreaterOrEqual(t, won.Load(), int64(keys*99/100))

	g := &useFilter{window: int64(time.Minute)}
	const many = 300_000
	claimed := 0
	for k := range many {
		if g.claim(uint64(k+1)*0xBF58476D1CE4E5B9, at+int64(k)) {
			claimed++
		}
	}
	assert.GreaterOrEqual(t, claimed, many*99/100, "false positives")
	words := 0
	for _, gen := range g.gens {
		words += len(gen.words)
	}
	assert.LessOrEqual(t, words, 2*maxUseWords)
	t.Logf("%d of %d claimed, %d generations, %d words", claimed, many, len(g.gens), words)

	first := uint64(1) * 0xBF58476D1CE4E5B9 // claimed at at
	require.False(t, g.claim(first, at+int64(time.Minute)-1), "a key claimed again within its window")
	assert.True(t, g.claim(first, at+int64(3*time.Minute)), "a key claimed a window before")
}

// TestFirstUsesAndSharesGrantTheLimitWhenTheStoreFails: three pods on one
// Redis, each with its first use and some grants of the store, then the
// store fails for all of them: on their shares (the limit less the reserved
// permits, divided) they let through no more than the limit in the window.
// One of them asks the store for every decision and takes no first use.
func TestFirstUsesAndSharesGrantTheLimitWhenTheStoreFails(t *testing.T) {
	srv := redistest.Start(t)
	const limit, pods = 3000, 3
	var ls []*Limiter
	var sws []*switchStore
	for range pods {
		cfg := testLimitsConfig(func(cfg *Config) {
			cfg.IP, cfg.Window = limit, time.Minute
			cfg.BreakerFailures = 1
		})
		strict := cfg
		strict.LocalFastPath = new(bool) // a pod asking the store for every decision takes no first use
		if len(ls) == 0 {
			cfg = strict
		}
		sw := &switchStore{Store: newRedisStore(t, srv.Addr)}
		sws = append(sws, sw)
		ls = append(ls, newTestLimiter(t, cfg, sw, Options{LivePods: func() int { return pods }}))
	}
	req := &Request{IP: []byte("10.8.4.1")}
	before := firstUseGrants.Get()
	total := 0
	for _, l := range ls {
		n, _ := allowN(l, req, 400)
		total += n
	}
	require.EqualValues(t, pods-1, firstUseGrants.Get()-before)
	require.Equal(t, pods*400, total)
	for _, sw := range sws {
		sw.down.Store(true)
	}
	for _, l := range ls {
		n, _ := allowN(l, req, limit)
		total += n
	}
	t.Logf("%d let through in the window", total)
	assert.LessOrEqual(t, total, limit)
}

// TestFirstUseClaimAllocatesNothing: a claim, granted or not, allocates
// nothing but a generation's words when it opens one.
func TestFirstUseClaimAllocatesNothing(t *testing.T) {
	f := newFirstUses()
	key := []byte("t{ip:10.8.5.1}:sw")
	f.claim(key, time.Minute, int64(time.Hour))
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		key[len(key)-1] = byte('a' + i%26) // 26 keys: claimed once, then seen
		i++
		f.claim(key, time.Minute, int64(time.Hour))
	})
	assert.Zero(t, allocs)
}

// TestFirstUsesThroughAStoreThatLostItsWrites: first uses are not in the
// store, so a store that loses its writes (FLUSHALL) loses none of them;
// the pods' grants before the loss are reported again (reportLost), and
// three pods, each with its first use, stay within the limit in the window.
func TestFirstUsesThroughAStoreThatLostItsWrites(t *testing.T) {
	srv := redistest.Start(t)
	const limit, pods = 3000, 3
	cfg := testLimitsConfig(func(cfg *Config) { cfg.IP, cfg.Window = limit, time.Minute })
	var ls []*Limiter
	for range pods {
		ls = append(ls, newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{LivePods: func() int { return pods }}))
	}
	req := &Request{IP: []byte("10.8.6.1")}
	before := firstUseGrants.Get()
	total := 0
	for _, l := range ls {
		n, _ := allowN(l, req, 500)
		total += n
	}
	require.EqualValues(t, pods, firstUseGrants.Get()-before)
	require.Equal(t, pods*500, total)

	cl, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	require.NoError(t, cl.Do(context.Background(), cl.B().Flushall().Build()).Error())

	for range 4 {
		for _, l := range ls {
			n, _ := allowN(l, req, limit/4)
			total += n
		}
	}
	t.Logf("%d let through in the window", total)
	assert.LessOrEqual(t, total, limit+limit/slightPart)
	assert.GreaterOrEqual(t, total, limit-limit/50, "the pods were held under the limit")
}

// TestBusyKeyGetsItsWholeLimitEveryWindow: a key whose bucket lives from
// one window to the next takes no first use; when the store refuses it,
// the pod lets one request through on its reserved permit, once a window,
// so the key gets the whole limit in every window, not the limit less the
// pods' permits.
func TestBusyKeyGetsItsWholeLimitEveryWindow(t *testing.T) {
	clock, now, _, sw := clockedStore(t)
	cfg := testLimitsConfig(func(cfg *Config) { cfg.IP, cfg.Window = 1000, time.Minute })
	l := newTestLimiter(t, cfg, sw, Options{Now: now, LivePods: func() int { return 1 }})
	req := &Request{IP: []byte("10.8.7.1")}
	for w := range 3 {
		n, last := allowN(l, req, 1500)
		assert.Equal(t, 1000, n, "window %d", w)
		assert.False(t, last.Allowed)
		clock.Add(int64(2 * time.Minute)) // past the window and its leases; the bucket stays: no sweep
		require.Equal(t, 1, l.table.len(), "the bucket went")
	}
}
