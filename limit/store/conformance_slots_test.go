package store

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The concurrency slots' cases of the conformance suite.

func init() {
	confCases = append(confCases,
		confCase{"SlotsNeverMoreThanLimit", confSlotsNeverMoreThanLimit},
		confCase{"SlotsReleaseGivesBack", confSlotsRelease},
		confCase{"SlotsAllOrNothing", confSlotsAllOrNothing},
		confCase{"SlotsExpiredLeaseComesBack", confSlotsExpired},
		confCase{"SlotsRenewKeepsTheLease", confSlotsRenew},
		confCase{"SlotsInvalidRequests", confSlotsInvalid},
	)
}

// slots sends req and fails the test on an error.
func (e *confEnv) slots(t *testing.T, req *SlotRequest) SlotResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := e.store.Slots(ctx, req)
	require.NoError(t, err)
	return res
}

// slotReq asks for want slots of limit for pod, with a TTL of ttl.
func slotReq(key, pod string, limit, want int64, ttl time.Duration) *SlotRequest {
	return &SlotRequest{Key: []byte(key), Pod: pod, Limit: limit, Want: want, TTL: ttl}
}

// slotRelease gives back n of pod's slots.
func slotRelease(key, pod string, limit, n int64, ttl time.Duration) *SlotRequest {
	return &SlotRequest{Key: []byte(key), Pod: pod, Limit: limit, Release: n, TTL: ttl}
}

// confSlotsNeverMoreThanLimit: 3 pods of 8 callers each take and give back
// slots at random; the slots the callers know they hold never pass the
// limit (a caller counts a grant after the store made it, and a release
// before it sends it, so its count never exceeds the store's), nor does
// any answer's InUse; at the end every pod holds none.
func confSlotsNeverMoreThanLimit(t *testing.T, e *confEnv, key string) {
	const limit = 10
	pods := []string{"pod-a", "pod-b", "pod-c"}
	var mu sync.Mutex
	var known, grants, refusals int64
	var wg sync.WaitGroup
	for _, pod := range pods {
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := int64(0)
				for i := 0; i < 30; i++ {
					req := slotReq(key, pod, limit, rand.Int64N(3)+1, 10*time.Second)
					if mine > 0 && rand.IntN(2) == 0 {
						req.Release, req.Want = rand.Int64N(mine)+1, 0
						mine -= req.Release
						mu.Lock()
						known -= req.Release
						mu.Unlock()
					}
					res, err := e.store.Slots(context.Background(), req)
					if !assert.NoError(t, err) {
						return
					}
					assert.LessOrEqual(t, res.InUse, int64(limit))
					assert.LessOrEqual(t, res.Held, res.InUse)
					mine += res.Granted
					mu.Lock()
					known += res.Granted
					assert.LessOrEqual(t, known, int64(limit), "callers hold more slots than the limit")
					if req.Want > 0 && res.Granted == 0 {
						refusals++
					} else if res.Granted > 0 {
						grants++
					}
					mu.Unlock()
				}
				if mine > 0 {
					mu.Lock()
					known -= mine
					mu.Unlock()
					_, err := e.store.Slots(context.Background(), slotRelease(key, pod, limit, mine, 10*time.Second))
					assert.NoError(t, err)
				}
			}()
		}
	}
	wg.Wait()
	assert.Positive(t, grants)
	assert.Positive(t, refusals, "the callers never raced for the last slots")
	for _, pod := range pods {
		res := e.slots(t, slotReq(key, pod, limit, 0, 10*time.Second))
		assert.Equal(t, SlotResult{}, res, pod)
	}
	e.assertNoSlotsKey(t, key)
}

// confSlotsRelease: a release gives slots back to every pod at once, is
// clamped at the pod's count, and comes before the call's grant; a pod
// whose count falls to 0 loses its field, and the key goes with the last.
func confSlotsRelease(t *testing.T, e *confEnv, key string) {
	ttl := 10 * time.Second
	assert.Equal(t, SlotResult{Granted: 5, Held: 5, InUse: 5}, e.slots(t, slotReq(key, "a", 5, 5, ttl)))
	r := e.slots(t, slotReq(key, "b", 5, 1, ttl))
	assert.Equal(t, int64(0), r.Granted)
	assert.Equal(t, int64(5), r.InUse)
	assert.Positive(t, r.FreeIn)
	assert.LessOrEqual(t, r.FreeIn, ttl)
	assert.Equal(t, SlotResult{Held: 3, InUse: 3}, e.slots(t, slotRelease(key, "a", 5, 2, ttl)))
	assert.Equal(t, SlotResult{Granted: 2, Held: 2, InUse: 5}, e.slots(t, slotReq(key, "b", 5, 2, ttl)))
	assert.Equal(t, SlotResult{Held: 0, InUse: 2}, e.slots(t, slotRelease(key, "a", 5, 10, ttl)), "a release past the count is clamped")
	e.assertSlotsField(t, key, "a", false)
	e.assertSlotsField(t, key, "b", true)
	both := slotRelease(key, "b", 5, 1, ttl)
	both.Want = 4
	assert.Equal(t, SlotResult{Granted: 4, Held: 5, InUse: 5}, e.slots(t, both), "the release comes first")
	assert.Equal(t, SlotResult{}, e.slots(t, slotRelease(key, "b", 5, 5, ttl)))
	e.assertNoSlotsKey(t, key)
}

// confSlotsAllOrNothing: fewer than Need slots free grant none and take
// nothing; Need 0 means Want.
func confSlotsAllOrNothing(t *testing.T, e *confEnv, key string) {
	ttl := 10 * time.Second
	assert.Equal(t, int64(3), e.slots(t, slotReq(key, "a", 5, 3, ttl)).Granted)
	req := slotReq(key, "b", 5, 4, ttl)
	req.Need = 3
	r := e.slots(t, req)
	assert.Equal(t, int64(0), r.Granted, "2 free, need 3")
	assert.Equal(t, int64(0), r.Held)
	assert.Equal(t, int64(3), r.InUse, "a refusal takes nothing")
	assert.Positive(t, r.FreeIn)
	req.Need = 2
	assert.Equal(t, SlotResult{Granted: 2, Held: 2, InUse: 5}, e.slots(t, req), "partial above need")
	assert.Equal(t, SlotResult{Held: 2, InUse: 4}, e.slots(t, slotRelease(key, "a", 5, 1, ttl)))
	r = e.slots(t, slotReq(key, "b", 5, 2, ttl)) // need 0: all 2 or none
	assert.Equal(t, int64(0), r.Granted, "1 free, need 0 means want (2)")
	assert.Equal(t, int64(2), r.Held)
	req = slotReq(key, "b", 5, 2, ttl)
	req.Need = 1
	assert.Equal(t, SlotResult{Granted: 1, Held: 3, InUse: 5}, e.slots(t, req))
	r = e.slots(t, slotReq(key, "c", 0, 1, ttl))
	assert.Equal(t, int64(0), r.Granted, "limit 0 grants nothing")
	assert.Equal(t, int64(5), r.InUse, "a lowered limit counts every slot held")
}

// confSlotsExpired: the slots of a pod that stops calling come back when
// its lease expires; FreeIn says when, within the lease's TTL.
func confSlotsExpired(t *testing.T, e *confEnv, key string) {
	const ttl = 200 * time.Millisecond
	assert.Equal(t, int64(3), e.slots(t, slotReq(key, "a", 3, 3, ttl)).Granted)
	r := e.slots(t, slotReq(key, "b", 3, 1, ttl))
	assert.Equal(t, int64(0), r.Granted)
	assert.Positive(t, r.FreeIn)
	assert.LessOrEqual(t, r.FreeIn, ttl)
	e.sleep(100 * time.Millisecond)
	r = e.slots(t, slotReq(key, "b", 3, 1, ttl))
	assert.Equal(t, int64(0), r.Granted)
	assert.LessOrEqual(t, r.FreeIn, 100*time.Millisecond, "a's lease has aged at least 100ms")
	e.sleep(150 * time.Millisecond)
	assert.Equal(t, SlotResult{Granted: 3, Held: 3, InUse: 3}, e.slots(t, slotReq(key, "b", 3, 3, ttl)), "a's lease expired")
	assert.Equal(t, SlotResult{InUse: 3}, e.slots(t, slotRelease(key, "a", 3, 3, ttl)), "a's slots are gone")
	e.assertSlotsField(t, key, "a", false)
	e.sleep(250 * time.Millisecond)
	assert.Equal(t, SlotResult{}, e.slots(t, slotReq(key, "a", 3, 0, ttl)), "b's lease expired")
}

// confSlotsRenew: a pod that renews its lease (Want 0) keeps its slots past
// the TTL; once it stops, they come back.
func confSlotsRenew(t *testing.T, e *confEnv, key string) {
	const ttl = 200 * time.Millisecond
	assert.Equal(t, int64(2), e.slots(t, slotReq(key, "a", 2, 2, ttl)).Granted)
	for elapsed := time.Duration(0); elapsed < 400*time.Millisecond; elapsed += 50 * time.Millisecond {
		e.sleep(50 * time.Millisecond)
		start := time.Now()
		assert.Equal(t, SlotResult{Held: 2, InUse: 2}, e.slots(t, slotReq(key, "a", 2, 0, ttl)), "renewed at %v", elapsed)
		r := e.slots(t, slotReq(key, "b", 2, 1, ttl))
		if e.clock == nil && time.Since(start) > ttl/2 {
			t.Logf("renewal and check %v apart: not checked", time.Since(start))
			continue
		}
		assert.Equal(t, int64(0), r.Granted, "b took a's slots at %v", elapsed)
		assert.Positive(t, r.FreeIn)
		assert.LessOrEqual(t, r.FreeIn, ttl)
	}
	e.sleep(ttl + 50*time.Millisecond)
	assert.Equal(t, int64(2), e.slots(t, slotReq(key, "b", 2, 2, ttl)).Granted)
}

// confSlotsInvalid: requests out of their bounds are refused before they run.
func confSlotsInvalid(t *testing.T, e *confEnv, key string) {
	ok := func(mod func(r *SlotRequest)) *SlotRequest {
		r := slotReq(key, "a", 5, 1, time.Second)
		mod(r)
		return r
	}
	for name, req := range map[string]*SlotRequest{
		"nil":              nil,
		"no key":           ok(func(r *SlotRequest) { r.Key = nil }),
		"empty pod":        ok(func(r *SlotRequest) { r.Pod = "" }),
		"long pod":         ok(func(r *SlotRequest) { r.Pod = strings.Repeat("p", MaxPodName+1) }),
		"negative limit":   ok(func(r *SlotRequest) { r.Limit = -1 }),
		"limit too big":    ok(func(r *SlotRequest) { r.Limit = MaxLimit + 1 }),
		"negative release": ok(func(r *SlotRequest) { r.Release = -1 }),
		"negative want":    ok(func(r *SlotRequest) { r.Want = -1 }),
		"want too big":     ok(func(r *SlotRequest) { r.Want = MaxLimit + 1 }),
		"negative need":    ok(func(r *SlotRequest) { r.Need = -1 }),
		"need over want":   ok(func(r *SlotRequest) { r.Need = 2 }),
		"need, want 0":     ok(func(r *SlotRequest) { r.Want, r.Need = 0, 1 }),
		"zero ttl":         ok(func(r *SlotRequest) { r.TTL = 0 }),
		"negative ttl":     ok(func(r *SlotRequest) { r.TTL = -time.Second }),
		"ttl under 1ms":    ok(func(r *SlotRequest) { r.TTL = time.Microsecond }),
		"ttl over 1h":      ok(func(r *SlotRequest) { r.TTL = time.Hour + time.Millisecond }),
	} {
		_, err := e.store.Slots(context.Background(), req)
		assert.Error(t, err, name)
	}
	assert.Equal(t, SlotResult{}, e.slots(t, slotReq(key, "a", 5, 0, time.Second)), "nothing was taken")
	long := e.slots(t, slotReq(key, strings.Repeat("p", MaxPodName), MaxLimit, MaxLimit, time.Hour))
	assert.Equal(t, SlotResult{Granted: MaxLimit, Held: MaxLimit, InUse: MaxLimit}, long, "the bounds themselves")
}

// assertSlotsField checks (Redis only) whether pod has a field in key's
// hash, and that the hash has a TTL.
func (e *confEnv) assertSlotsField(t *testing.T, key, pod string, want bool) {
	t.Helper()
	if e.client == nil {
		return
	}
	ctx := context.Background()
	k := "test:" + key + suffixSlots
	has, err := e.client.Do(ctx, e.client.B().Hexists().Key(k).Field(pod).Build()).AsBool()
	require.NoError(t, err)
	assert.Equal(t, want, has, "field %s of %s", pod, k)
	pttl, err := e.client.Do(ctx, e.client.B().Pttl().Key(k).Build()).AsInt64()
	require.NoError(t, err)
	assert.True(t, pttl == -2 || pttl > 0, "key %s: PTTL %d", k, pttl)
}

// assertNoSlotsKey checks that key holds no slots: its Redis key is gone,
// or the MemoryStore dropped its entry.
func (e *confEnv) assertNoSlotsKey(t *testing.T, key string) {
	t.Helper()
	if e.client == nil {
		if m, ok := e.store.(*MemoryStore); ok {
			assert.Zero(t, m.Len(), "the entry outlived its leases")
		}
		return
	}
	k := "test:" + key + suffixSlots
	n, err := e.client.Do(context.Background(), e.client.B().Exists().Key(k).Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n, "key %s outlived its leases", k)
}
