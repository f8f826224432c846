package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The calendar quota's cases of the conformance suite. Boundaries are real
// ones: an hour in a fixed zone whose offset puts the hour's end where the
// test wants it relative to the store's clock (the injected clock, or
// Redis' TIME), so neither store needs a test mode.

func init() {
	confCases = append(confCases,
		confCase{"QuotaAllowDeny", confQuotaAllowDeny},
		confCase{"QuotaPods", confQuotaPods},
		confCase{"QuotaBoundary", confQuotaBoundary},
		confCase{"QuotaReturn", confQuotaReturn},
		confCase{"QuotaUnleased", confQuotaUnleased},
		confCase{"QuotaInvalid", confQuotaInvalid},
		confCase{"QuotaNodeClockOff", confQuotaClockOff},
	)
}

// storeNow is the store's clock: the injected one, or Redis' TIME.
func (e *confEnv) storeNow(t *testing.T) time.Time {
	t.Helper()
	if e.clock != nil {
		return e.clock.Now()
	}
	tm, err := e.client.Do(context.Background(), e.client.B().Time().Build()).AsIntSlice()
	require.NoError(t, err)
	require.Len(t, tm, 2)
	return time.Unix(tm[0], tm[1]*1000)
}

// hourEndingIn returns a fixed zone whose current hour ends between d and
// d + 1s after the store's now (zone offsets are whole seconds).
func (e *confEnv) hourEndingIn(t *testing.T, d time.Duration) *time.Location {
	t.Helper()
	b := e.storeNow(t).Add(d + time.Second - 1).Unix() // a whole second at or after now + d
	return time.FixedZone("test", int(((-b)%3600+3600)%3600))
}

func quotaParams(limit int64, zone *time.Location) Params {
	return Params{Algorithm: Quota, Limit: limit, Period: Hour, Zone: zone}
}

// confQuotaAllowDeny: Limit permits per period, then refusals until the
// period's end, which Reset and FirstFree also name.
func confQuotaAllowDeny(t *testing.T, e *confEnv, key string) {
	zone := e.hourEndingIn(t, 30*time.Minute)
	p := quotaParams(3, zone)
	for i := int64(1); i <= 3; i++ {
		r := e.lease(t, key, p, 1, time.Second, "")
		require.Equal(t, int64(1), r.Granted, "request %d", i)
		assert.Equal(t, 3-i, r.Remaining)
		assert.Zero(t, r.RetryAfter)
	}
	_, end := Hour.Bounds(e.storeNow(t), zone)
	left := end.Sub(e.storeNow(t))
	r := e.lease(t, key, p, 1, time.Second, "")
	assert.Zero(t, r.Granted)
	assert.Zero(t, r.Remaining)
	assert.InDelta(t, left, r.RetryAfter, float64(2*time.Second), "retry at the next boundary")
	assert.Equal(t, r.RetryAfter, r.Reset, "the budget is whole again at the period's end")
	assert.Equal(t, r.Reset, r.FirstFree, "the first counted permit leaves at the period's end")
	assert.GreaterOrEqual(t, r.RetryAfter, 30*time.Minute-2*time.Second)
	assert.LessOrEqual(t, r.RetryAfter, 30*time.Minute+2*time.Second)

	res, err := e.store.Lease(context.Background(), &LeaseRequest{Key: []byte(key + ":big"), Params: p, Want: 4, Need: 4})
	require.NoError(t, err)
	assert.Equal(t, time.Duration(-1), res.RetryAfter, "more than the limit at once: never")
	fresh := e.lease(t, key+":fresh", p, 1, 0, "")
	assert.Equal(t, fresh.Reset, fresh.FirstFree)
	assert.InDelta(t, left, fresh.Reset, float64(2*time.Second))
}

// confQuotaPods: three pods lease, use part of each lease and return the
// rest with their next call, at once, until refused: together they use
// exactly the limit of the period, never more.
func confQuotaPods(t *testing.T, e *confEnv, key string) {
	const limit = 60
	p := quotaParams(limit, e.hourEndingIn(t, 30*time.Minute))
	var mu sync.Mutex
	var used int64
	var wg sync.WaitGroup
	for pod := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var unused, ref int64
			for call := 0; ; call++ {
				res, err := e.store.Lease(context.Background(), &LeaseRequest{Key: []byte(key), Params: p, Want: 4, LeaseTTL: time.Second, Return: unused, ReturnRef: ref})
				if !assert.NoError(t, err) || res.Granted == 0 {
					return
				}
				use := res.Granted - int64((pod+call)%2) // some leases go half used
				unused, ref = res.Granted-use, res.Ref
				mu.Lock()
				used += use
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(limit), used, "the pods together used more or less than the period's limit")
	assert.Zero(t, e.lease(t, key, p, 1, 0, "").Granted)
}

// confQuotaBoundary: a period's permits never count in the next one, which
// starts at zero; a lease granted before the boundary says so (Reset), so
// that its holder does not use it past the boundary.
func confQuotaBoundary(t *testing.T, e *confEnv, key string) {
	zone := e.hourEndingIn(t, time.Second)
	p := quotaParams(2, zone)
	a := e.lease(t, key, p, 2, time.Hour, "")
	require.Equal(t, int64(2), a.Granted)
	assert.LessOrEqual(t, a.Reset, 2*time.Second, "a lease's lifetime must end at the period's end")
	r := e.lease(t, key, p, 1, 0, "")
	require.Zero(t, r.Granted)
	require.Positive(t, r.RetryAfter)
	require.LessOrEqual(t, r.RetryAfter, 2*time.Second)
	if e.clock != nil {
		e.sleep(r.RetryAfter - time.Millisecond)
		assert.Zero(t, e.lease(t, key, p, 1, 0, "").Granted, "granted before the boundary")
		e.sleep(time.Millisecond)
	} else {
		e.sleep(r.RetryAfter + 20*time.Millisecond)
	}
	b := e.lease(t, key, p, 5, 0, "")
	assert.Equal(t, int64(2), b.Granted, "the new period starts at zero")
	assert.NotEqual(t, a.Ref, b.Ref, "a new period counts apart")
	assert.InDelta(t, time.Hour, b.Reset, float64(2*time.Second))
}

// confQuotaReturn: unused permits go back to their period while it lasts;
// after its end they go nowhere (the new period starts at zero anyway).
func confQuotaReturn(t *testing.T, e *confEnv, key string) {
	zone := e.hourEndingIn(t, 1500*time.Millisecond)
	p := quotaParams(5, zone)
	ctx := context.Background()
	a := e.lease(t, key, p, 5, time.Second, "")
	require.Equal(t, int64(5), a.Granted)
	r, err := e.store.Lease(ctx, &LeaseRequest{Key: []byte(key), Params: p, Want: 5, Return: 3, ReturnRef: a.Ref})
	require.NoError(t, err)
	require.Equal(t, int64(3), r.Granted, "the 3 returned permits are granted again")
	e.sleep(r.Reset + 20*time.Millisecond) // into the next period
	r, err = e.store.Lease(ctx, &LeaseRequest{Key: []byte(key), Params: p, Want: 10, Return: 3, ReturnRef: a.Ref})
	require.NoError(t, err)
	assert.Equal(t, int64(5), r.Granted, "a return to a period that is over added to the new one")
}

// confQuotaUnleased: permits used without a lease count in the
// period they were let through in; those of a period that is over count
// nowhere.
func confQuotaUnleased(t *testing.T, e *confEnv, key string) {
	zone := e.hourEndingIn(t, time.Hour-10*time.Second) // the hour began about 10s ago
	p := quotaParams(10, zone)
	r, err := e.store.Lease(context.Background(), &LeaseRequest{Key: []byte(key), Params: p, Want: 10,
		Unleased: 2, UnleasedAgo: time.Second,
		UnleasedBefore: [UnleasedParts]UnleasedPart{{N: 3, Ago: 5 * time.Second}, {N: 100, Ago: 30 * time.Second}, {N: 100, Ago: 2 * time.Hour}}})
	require.NoError(t, err)
	assert.Equal(t, int64(5), r.Granted, "unleased permits of this period count, those of the last one do not")
	r, err = e.store.Lease(context.Background(), &LeaseRequest{Key: []byte(key + ":old"), Params: p, Want: 10, Unleased: 7, UnleasedAgo: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, int64(10), r.Granted, "unleased permits of a period that is over were counted")
}

func confQuotaInvalid(t *testing.T, e *confEnv, key string) {
	for name, p := range map[string]Params{
		"period on a sliding window": {Algorithm: SlidingWindow, Limit: 1, Window: time.Second, Period: Day},
		"period on a token bucket":   {Algorithm: TokenBucket, Capacity: 1, RefillRate: 1, Period: Day},
		"quota without a period":     {Algorithm: Quota, Limit: 1},
		"unknown period":             {Algorithm: Quota, Limit: 1, Period: Year + 1},
		"limit over the bound":       {Algorithm: Quota, Limit: MaxLimit + 1, Period: Day},
		"negative limit":             {Algorithm: Quota, Limit: -1, Period: Day},
		"window over a year":         {Algorithm: Quota, Limit: 1, Period: Year, Window: MaxPeriod + 1},
	} {
		_, err := e.store.Lease(context.Background(), &LeaseRequest{Key: []byte(key), Params: p, Want: 1})
		assert.Error(t, err, name)
	}
	ok := Params{Algorithm: Quota, Limit: 0, Period: Month, Window: 31 * 24 * time.Hour}
	r, err := e.store.Lease(context.Background(), &LeaseRequest{Key: []byte(key), Params: ok, Want: 1})
	require.NoError(t, err, "limit 0 refuses; a window of the period's length is allowed")
	assert.Zero(t, r.Granted)
	assert.Positive(t, r.RetryAfter)
}

// confQuotaClockOff: a pod whose estimate of the node's clock is an hour
// off still counts into the period of Redis' clock (the script refuses the
// period it computed, and the call runs again in the right one).
func confQuotaClockOff(t *testing.T, e *confEnv, key string) {
	if e.client == nil {
		t.Skip("the in-process store has one clock")
	}
	p := quotaParams(4, e.hourEndingIn(t, 30*time.Minute))
	for _, off := range []time.Duration{time.Hour, -time.Hour} {
		s := NewRedisStore(e.client, RedisStoreOptions{KeyPrefix: "test"})
		for i := range s.clocks {
			s.clocks[i].offset.Store(off.Microseconds())
			s.clocks[i].known.Store(true)
		}
		r, err := s.Lease(context.Background(), &LeaseRequest{Key: []byte(key), Params: p, Want: 2})
		require.NoError(t, err, "offset %v", off)
		assert.Equal(t, int64(2), r.Granted, "offset %v", off)
	}
	r := e.lease(t, key, p, 4, 0, "")
	assert.Equal(t, int64(0), r.Granted, "the skewed pods counted into another period")
}

// TestQuotaCallArgs: a quota's call names the period's counter by the
// period and its start, in the zone, and sends the bounds for the script
// to check against Redis' clock.
func TestQuotaCallArgs(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	at := time.Date(2026, 3, 29, 12, 0, 0, 0, berlin) // a 23-hour day
	req := &LeaseRequest{Key: []byte("{key:abc}"), Params: Params{Algorithm: Quota, Limit: 2000, Period: Day, Zone: berlin},
		Want: 5, Need: 2, Return: 1, ReturnRef: 7, Unleased: 3, UnleasedAgo: 4 * time.Millisecond,
		UnleasedBefore: [UnleasedParts]UnleasedPart{{N: 1, Ago: 9 * time.Millisecond}}}
	c := getRedisCall()
	c.build("p:", req, 42, at)
	assert.Same(t, quotaScript, c.script)
	start := time.Date(2026, 3, 29, 0, 0, 0, 0, berlin).UnixMilli()
	end := start + 23*3600*1000
	assert.Equal(t, []string{fmt.Sprintf("p:{key:abc}:q:day:%d", start)}, c.keys)
	want := []string{"2000", "5", fmt.Sprint(start), fmt.Sprint(end), "2", "1", "7", "42", "0", "3", "4", "0", "1", "9"} // the unleased parts up to the last that holds permits
	assert.Equal(t, want, c.args)
}
