package limit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestLostGrantsReportedAgain: a pod that finds that the store lost a key's
// writes (FLUSHALL) reports again what it was granted of the window, so a
// pod that cannot know of the loss (one restarted since) is not granted the
// budget the first one used before it.
func TestLostGrantsReportedAgain(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window = 100, 10*time.Second
		c.LocalFastPath = new(bool) // one permit per call: the store's count is exact
	})
	pods := func() int { return 2 }
	first := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{LivePods: pods})
	req := &Request{IP: []byte("10.9.9.9")}
	before, _ := allowN(first, req, 40)
	require.Equal(t, 40, before)

	flushAll(t, srv.Addr)

	emptied, reported := storeEmptied.Get(), lostReported.Get()
	after, _ := allowN(first, req, 2) // the first call finds the loss, the next reports
	require.Greater(t, storeEmptied.Get(), emptied, "the loss was not noticed")
	assert.Equal(t, uint64(before), lostReported.Get()-reported, "the permits reported again")

	restarted := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{LivePods: pods})
	got, _ := allowN(restarted, req, 100)
	t.Logf("%d before the loss, %d after it, %d to a pod started after it", before, after, got)
	assert.LessOrEqual(t, before+after+got, 100)
	assert.GreaterOrEqual(t, before+after+got, 98, "the pods were held under the limit")
}

// TestTokenBucketAfterALossStartsAtTheLastLevel: three pods share a token
// bucket unevenly (the first takes two requests of every four) until it is
// empty, none refused yet; the store loses it (FLUSHALL). The first call after the loss
// makes the bucket at the level its pod's last answer left (plus the
// refill since), not full: the pods' shares alone, which they keep to after
// the loss, would let the pods that had used less than theirs take the rest
// of them again (106 of 90 without it).
func TestTokenBucketAfterALossStartsAtTheLastLevel(t *testing.T) {
	srv := redistest.Start(t)
	const capacity = 90
	cat := testCatalog(t, catalog.Rule{Tenant: "acme", Resource: "tb", Algorithm: store.TokenBucket, Capacity: capacity, RefillRate: 0.001})
	cfg := testLimitsConfig(func(c *Config) {
		c.Tenant = 1_000_000
		c.LocalFastPath = new(bool) // one permit per call: the store's count is exact
	})
	var ls []*Limiter
	for range 3 {
		ls = append(ls, newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{Catalog: cat, LivePods: func() int { return 3 }}))
	}
	req := &Request{Tenant: "acme", Plan: "PREMIUM", Resource: "tb"}
	turns := []int{0, 0, 1, 2}
	offer := func(n int) int {
		got := 0
		for i := range n {
			if ls[turns[i%len(turns)]].Allow(context.Background(), req).Allowed {
				got++
			}
		}
		return got
	}
	before := offer(capacity) // exactly: no pod holds a refusal of the store's
	require.Equal(t, capacity, before)

	flushAll(t, srv.Addr)

	after := offer(2 * capacity)
	t.Logf("%d before the loss, %d after it", before, after)
	assert.LessOrEqual(t, before+after, capacity+3, "the bucket made anew full")
}

// TestAfterALossClientsUnderTheLimitAreServed: five pods share a sliding
// window of 100 evenly, 10 each, and the store loses the key (FLUSHALL):
// each notices the loss and keeps to its share of 20 for a window, and
// the 10 more that each asks for, the limit in all, fit in it.
func TestAfterALossClientsUnderTheLimitAreServed(t *testing.T) {
	srv := redistest.Start(t)
	ls := exactPods(t, srv.Addr, 5)
	req := &Request{IP: []byte("10.9.9.11")}
	use := func() (got int) {
		for range 10 {
			for _, l := range ls {
				if l.Allow(context.Background(), req).Allowed {
					got++
				}
			}
		}
		return got
	}
	require.Equal(t, 50, use())

	flushAll(t, srv.Addr)
	emptied := storeEmptied.Get()
	assert.Equal(t, 50, use(), "clients under the limit were refused after the loss")
	assert.Greater(t, storeEmptied.Get(), emptied, "the loss was not noticed")
}

// TestALossIsNoticedAfterTheOthersCalls: the store loses a key (FLUSHALL)
// that two pods used, 40 and 10 times; the second then calls for it more
// times than the first had before the loss, so the key's call number is
// past the first pod's when it calls again. The first still notices the
// loss, from the time the key was made anew, and the pods stay within the
// limit; taken for a store that lost nothing, its 40 were forgotten and
// the pods let 140 through.
func TestALossIsNoticedAfterTheOthersCalls(t *testing.T) {
	srv := redistest.Start(t)
	ls := exactPods(t, srv.Addr, 2)
	a, b := ls[0], ls[1]
	req := &Request{IP: []byte("10.9.9.12")}
	first, _ := allowN(a, req, 40)
	second, _ := allowN(b, req, 10)
	require.Equal(t, 50, first+second)

	flushAll(t, srv.Addr)
	// The key is made anew later than the first pod's last answer by more
	// than a store call can take (the time it is known to within).
	time.Sleep(a.cfg.StoreTimeout + 5*time.Millisecond)

	emptied := storeEmptied.Get()
	more, _ := allowN(b, req, 45)
	require.Equal(t, emptied+1, storeEmptied.Get(), "the second pod noticed the loss")
	last, _ := allowN(a, req, 100)
	t.Logf("%d and %d before the loss; %d and %d after it", first, second, more, last)
	assert.Equal(t, emptied+2, storeEmptied.Get(), "the first pod did not notice the loss")
	assert.LessOrEqual(t, first+second+more+last, 100)
	assert.GreaterOrEqual(t, first+second+more+last, 98, "the pods were held under the limit")
}

// exactPods are n pods (LivePods n) on the redis-server at addr, each
// asking the store for every permit (its count is exact), with an IP
// limit of 100 in a window long enough that no permit leaves it during a
// test, however slow the machine.
func exactPods(t *testing.T, addr string, n int) []*Limiter {
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window = 100, 1000*time.Second
		c.LocalFastPath = new(bool)
	})
	ls := make([]*Limiter, n)
	for i := range ls {
		ls[i] = newTestLimiter(t, cfg, newRedisStore(t, addr), Options{LivePods: func() int { return n }})
	}
	return ls
}

// flushAll empties the redis-server at addr (FLUSHALL): the store loses
// every key's writes.
func flushAll(t *testing.T, addr string) {
	cl, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{addr}})
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.Do(context.Background(), cl.B().Flushall().Build()).Error())
}
