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

// TestFirstUseTakesNoStoreCall: on Redis, a key's first requests in a
// window under a limit of a thousand a pod or more make no store call and
// keep no bucket, as many as the permits the store keeps for the pod (a
// thousandth of the limit a pod, firstUseMost at most); the next asks the
// store. A limit under a thousand a pod asks the store from the first, and
// so does every key with limits.first_uses off.
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
			for range firstUseMost - 1 {
				ask()
			}
			assert.Zero(t, st.calls.Load(), "first uses asked the store")
			assert.Zero(t, l.table.len(), "first uses kept a bucket")
			n, err := cl.Do(context.Background(), cl.B().Dbsize().Build()).AsInt64()
			require.NoError(t, err)
			assert.Zero(t, n, "first uses wrote to Redis")
			ask()
			assert.EqualValues(t, keys, st.calls.Load(), "a key's request past its pod's permits in the window did not ask the store")
		})
	}
}

// TestFirstUsesAndTheStoreGrantTheLimit: three pods on one Redis, each
// with its own client, offer one key three times its limit: the store
// grants the limit less the permits it keeps for the pods (one each of
// 3,000, ten each of 30,000), each pod lets as many through on its own,
// and together they let through no more than the limit.
func TestFirstUsesAndTheStoreGrantTheLimit(t *testing.T) {
	for _, limit := range []int{3000, 30_000} {
		t.Run(strconv.Itoa(limit), func(t *testing.T) { firstUsesAndTheStore(t, limit) })
	}
}

func firstUsesAndTheStore(t *testing.T, limit int) {
	srv := redistest.Start(t)
	const pods = 3
	var ls []*Limiter
	for range pods {
		cfg := testLimitsConfig(func(cfg *Config) { cfg.IP, cfg.Window = int64(limit), time.Minute })
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
	assert.EqualValues(t, limit/slightPart, firstUseGrants.Get()-before, "each pod's first uses")
	// At most the limit (3,003 without the store's reservation); a lease
	// that expired unused after a pod's last request, on a busy machine,
	// stays counted, so a little less may pass.
	assert.LessOrEqual(t, allowed.Load(), int64(limit))
	assert.GreaterOrEqual(t, allowed.Load(), int64(limit-limit/100))
}

// TestFirstUsesAPodsPermitsAWindow: a pod lets a key through on its
// reserved permits (ten of a limit of 10,000) as many times in a window:
// after them, the key asks the store, even once its bucket is gone; a
// window later it may use them again.
func TestFirstUsesAPodsPermitsAWindow(t *testing.T) {
	clock, now, _, sw := clockedStore(t)
	st := &countingStore{Store: sw}
	cfg := testLimitsConfig(func(cfg *Config) { cfg.IP, cfg.Window = 10_000, time.Minute })
	l := newTestLimiter(t, cfg, st, Options{Now: now, LivePods: func() int { return 1 }})
	req := &Request{IP: []byte("10.8.2.1")}
	ask := func(remaining int64) {
		d := l.Allow(context.Background(), req)
		require.True(t, d.Allowed)
		if remaining >= 0 {
			require.Equal(t, remaining, d.Remaining, "one pod: the limit less the key's uses")
		}
	}
	for i := range 10 {
		ask(int64(10_000 - 1 - i))
	}
	require.Zero(t, st.calls.Load())
	ask(9989)
	require.EqualValues(t, 1, st.calls.Load())
	clock.Add(int64(1500 * time.Millisecond))
	l.sweep() // the slight bucket goes
	require.Zero(t, l.table.len())
	ask(-1)
	require.EqualValues(t, 2, st.calls.Load(), "a first use in the window past the pod's permits")
	clock.Add(int64(1500 * time.Millisecond))
	l.sweep()
	clock.Add(int64(2*time.Minute + time.Second))
	for range 10 {
		ask(-1)
	}
	assert.EqualValues(t, 2, st.calls.Load(), "no first uses a window later")
}

// TestFirstUsesKeepTheShareExact: a pod whose store fails decides on its
// share less the permits kept for its first uses, and on those it has
// left: one pod, a limit of 1,000 (or 10,000), lets through 1,000 (10,000)
// in the window, its first use among them.
func TestFirstUsesKeepTheShareExact(t *testing.T) {
	for _, limit := range []int64{1000, 10_000} {
		t.Run(strconv.FormatInt(limit, 10), func(t *testing.T) {
			_, now, _, sw := clockedStore(t)
			cfg := testLimitsConfig(func(cfg *Config) {
				cfg.IP, cfg.Window = limit, time.Minute
				cfg.BreakerFailures = 1
			})
			l := newTestLimiter(t, cfg, sw, Options{Now: now, LivePods: func() int { return 1 }})
			req := &Request{IP: []byte("10.8.3.1")}
			require.True(t, l.Allow(context.Background(), req).Allowed)
			sw.down.Store(true)
			alone, _ := allowN(l, req, int(3*limit))
			assert.EqualValues(t, limit-1, alone)
		})
	}
}

// TestUseFilterCountsUses: of concurrent claims of one key, no more than
// the most succeed, and each says how many the key has had; distinct keys
// far beyond the first generation's size are claimed (an over-count in a
// few hundred at most) as the filter grows, within its bound; a key's uses
// count for a window at least, then it may have as many again.
func TestUseFilterCountsUses(t *testing.T) {
	at := int64(time.Hour)
	const keys = 5000
	for _, most := range []int64{1, 5, firstUseMost} {
		f := &useFilter{window: int64(time.Minute)}
		var won [keys]atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range most {
					for k := range keys {
						if n, ok := f.claim(uint64(k+1)*0x9E3779B97F4A7C15, most, at); ok {
							if n < 1 || n > most {
								t.Errorf("key %d: count %d of %d", k, n, most)
							}
							won[k].Add(1)
						}
					}
				}
			}()
		}
		wg.Wait()
		total := int64(0)
		for k := range won {
			require.LessOrEqual(t, won[k].Load(), most, "key %d", k)
			total += won[k].Load()
		}
		assert.GreaterOrEqual(t, total, keys*most*99/100, "most %d", most)
		t.Logf("most %d: %d of %d claimed", most, total, keys*most)
	}

	g := &useFilter{window: int64(time.Minute)}
	const many = 300_000
	claimed := 0
	for k := range many {
		if n, ok := g.claim(uint64(k+1)*0xBF58476D1CE4E5B9, 1, at+int64(k)); ok {
			require.EqualValues(t, 1, n)
			claimed++
		}
	}
	assert.GreaterOrEqual(t, claimed, many*99/100, "over-counts")
	words := 0
	for _, gen := range g.gens {
		words += len(gen.words)
	}
	assert.LessOrEqual(t, words, 2*maxUseWords)
	t.Logf("%d of %d claimed, %d generations, %d words", claimed, many, len(g.gens), words)

	first := uint64(1) * 0xBF58476D1CE4E5B9 // claimed at at
	_, ok := g.claim(first, 1, at+int64(time.Minute)-1)
	require.False(t, ok, "a key claimed again within its window")
	n, ok := g.claim(first, 2, at+int64(time.Minute)-1)
	require.True(t, ok, "a key under a higher most")
	require.EqualValues(t, 2, n)
	n, ok = g.claim(first, 1, at+int64(3*time.Minute))
	assert.True(t, ok, "a key claimed a window before")
	assert.EqualValues(t, 1, n)
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
	total := allowOnEach(ls, req, 400)
	require.EqualValues(t, pods-1, firstUseGrants.Get()-before)
	require.Equal(t, pods*400, total)
	for _, sw := range sws {
		sw.down.Store(true)
	}
	total += allowOnEach(ls, req, limit)
	t.Logf("%d let through in the window", total)
	assert.LessOrEqual(t, total, limit)
}

// TestFirstUseClaimAllocatesNothing: a claim, granted or not, allocates
// nothing but a generation's words when it opens one.
func TestFirstUseClaimAllocatesNothing(t *testing.T) {
	f := newFirstUses()
	key := []byte("t{ip:10.8.5.1}:sw")
	f.claim(key, time.Minute, 2, int64(time.Hour))
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		key[len(key)-1] = byte('a' + i%26) // 26 keys: claimed twice, then seen
		i++
		f.claim(key, time.Minute, 2, int64(time.Hour))
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
	total := allowOnEach(ls, req, 500)
	require.EqualValues(t, pods, firstUseGrants.Get()-before)
	require.Equal(t, pods*500, total)

	flushAll(t, srv.Addr)

	trims, returns := recoveryTrims.Get(), returnedPermits.Get()
	for range 4 {
		total += allowOnEach(ls, req, limit/4)
	}
	// What a pod's share trims from a grant goes back to the store on a
	// goroutine of its own (keepShare), which a busy machine runs late, and
	// a pod refused meanwhile remembers the refusal (maxCachedDenial): once
	// both are over, the budget they held is asked for again, until none
	// is left.
	for range 5 {
		require.Eventually(t, func() bool { return returnedPermits.Get()-returns >= recoveryTrims.Get()-trims },
			10*time.Second, time.Millisecond, "trimmed permits not returned")
		time.Sleep(2 * maxCachedDenial)
		more := allowOnEach(ls, req, limit/4)
		if total += more; more == 0 {
			break
		}
	}
	t.Logf("%d let through in the window", total)
	assert.LessOrEqual(t, total, limit+limit/slightPart)
	assert.GreaterOrEqual(t, total, limit-limit/50, "the pods were held under the limit")
}

// TestBusyKeyGetsItsWholeLimitEveryWindow: a key whose bucket lives from
// one window to the next takes no first use; when the store refuses it,
// the pod lets requests through on its reserved permits (one of 1,000,
// ten of 10,000), as many a window, so the key gets the whole limit in
// every window, not the limit less the pods' permits.
func TestBusyKeyGetsItsWholeLimitEveryWindow(t *testing.T) {
	for _, limit := range []int{1000, 10_000} {
		t.Run(strconv.Itoa(limit), func(t *testing.T) {
			clock, now, _, sw := clockedStore(t)
			cfg := testLimitsConfig(func(cfg *Config) { cfg.IP, cfg.Window = int64(limit), time.Minute })
			l := newTestLimiter(t, cfg, sw, Options{Now: now, LivePods: func() int { return 1 }})
			req := &Request{IP: []byte("10.8.7.1")}
			for w := range 3 {
				n, last := allowN(l, req, limit*3/2)
				assert.Equal(t, limit, n, "window %d", w)
				assert.False(t, last.Allowed)
				clock.Add(int64(2 * time.Minute)) // past the window and its leases; the bucket stays: no sweep
				require.Equal(t, 1, l.table.len(), "the bucket went")
			}
		})
	}
}

// allowOnEach offers n requests of req to each limiter in turn, one after
// another, and returns how many they let through together.
func allowOnEach(ls []*Limiter, req *Request, n int) int {
	total := 0
	for _, l := range ls {
		got, _ := allowN(l, req, n)
		total += got
	}
	return total
}
