package faults

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/internal/spans"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestFaultRedisEmptiedMidWindow: Redis loses every count (FLUSHALL) in the
// middle of a 10 s window of tenant hot (100 per 10 s, offered 50/s round
// robin over three pods). The pods notice that the key was made anew while
// their permits still counted and keep to their shares for a window: no 10 s
// window holds more than the limit + 2%.
func TestFaultRedisEmptiedMidWindow(t *testing.T) {
	worst, emptied := lostWritesRun(t, func(rc rueidis.Client) {
		require.NoError(t, rc.Do(context.Background(), rc.B().Flushall().Build()).Error())
	}, nil)
	assert.Positive(t, emptied, "the pods noticed the emptied store")
	assert.LessOrEqual(t, worst, emptiedLimit+emptiedLimit*2/100, "busiest 10 s window of hot's approvals across the pods")
}

// TestFaultRedisBehindMidWindow: the store goes back to an older copy of
// tenant hot's counter (a replica promoted before it had the last writes),
// taken 1 s into a 10 s window and put back 4 s in. The pods notice the
// call numbers going back and keep to their shares: no 10 s window holds
// more than the limit + 2%.
func TestFaultRedisBehindMidWindow(t *testing.T) {
	var keys []string
	var copies []string
	worst, emptied := lostWritesRun(t, func(rc rueidis.Client) {
		ctx := context.Background()
		for i, k := range keys {
			require.NoError(t, rc.Do(ctx, rc.B().Restore().Key(k).Ttl(0).SerializedValue(copies[i]).Replace().Build()).Error())
		}
	}, func(rc rueidis.Client) {
		ctx := context.Background()
		var err error
		keys, err = rc.Do(ctx, rc.B().Keys().Pattern("*hot*").Build()).AsStrSlice()
		require.NoError(t, err)
		require.NotEmpty(t, keys)
		for _, k := range keys {
			v, err := rc.Do(ctx, rc.B().Dump().Key(k).Build()).ToString()
			require.NoError(t, err)
			copies = append(copies, v)
		}
	})
	assert.Positive(t, emptied, "the pods noticed the store going back")
	assert.LessOrEqual(t, worst, emptiedLimit+emptiedLimit*2/100, "busiest 10 s window of hot's approvals across the pods")
}

// emptiedLimit is the lost-writes tests' limit, per 10 s.
const emptiedLimit = 100

// lostWritesRun offers tenant hot (emptiedLimit per 10 s) 50/s round robin
// over three pods, calls snap (if not nil) 1 s in and lose 4 s in, and
// returns hot's busiest 10 s window and how many times the pods noticed
// lost writes.
func lostWritesRun(t *testing.T, lose, snap func(rueidis.Client)) (int, float64) {
	t.Helper()
	const limit, window = emptiedLimit, 10 * time.Second
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	var approved admissions
	cfg := harness.Config(up.URL, append(faultSections(fmt.Sprintf("{addrs: [%q]}", srv.Addr), "{ip: 0, tenant: 0}"),
		harness.WithSection("rules", fmt.Sprintf("  - {tenant: hot, resource: default, algorithm: sliding_window, limit: %d, window: 10s}\n", limit)))...)
	gws := threePods(t, cfg, &approved)
	rc, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(t, err)
	defer rc.Close()

	var hot codeTally
	approved.watch()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	offer(gws, "hot-key", 50, 5, &hot, stop, &wg)
	time.Sleep(time.Second)
	if snap != nil {
		snap(rc)
	}
	time.Sleep(3 * time.Second)
	lose(rc)
	flushed := time.Now()
	time.Sleep(12 * time.Second)
	close(stop)
	wg.Wait()

	all := approved.of("hot", time.Time{}, time.Time{})
	worst, from, _ := spans.Busiest(all, window)
	emptied := 0.0
	for _, g := range gws {
		emptied += harness.Scrape(t, g.Admin, "sentinel_limit_store_emptied_total")
	}
	t.Logf("faults: redis lost writes %v into the run: hot (limit %d per %v, offered 50/s over 3 pods): busiest window %d (from %v after the start), "+
		"answers %v; emptied keys noticed %.0f", flushed.Sub(start).Round(time.Millisecond), limit, window, worst,
		from.Sub(start).Round(time.Millisecond), hot.get(), emptied)
	assert.Equal(t, 0, others(hot.get()), "hot answers other than 200 and 429")
	assert.Positive(t, hot.get()[http.StatusOK])
	return worst, emptied
}
