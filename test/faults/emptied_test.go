package faults

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

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
	const limit, window = 100, 10 * time.Second
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
	time.Sleep(4 * time.Second)
	require.NoError(t, rc.Do(context.Background(), rc.B().Flushall().Build()).Error())
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
	t.Logf("faults: redis emptied %v into the run: hot (limit %d per %v, offered 50/s over 3 pods): busiest window %d (from %v after the start), "+
		"answers %v; emptied keys noticed %.0f", flushed.Sub(start).Round(time.Millisecond), limit, window, worst,
		from.Sub(start).Round(time.Millisecond), hot.get(), emptied)
	assert.Positive(t, emptied, "the pods noticed the emptied store")
	assert.LessOrEqual(t, worst, limit+limit*2/100, "busiest 10 s window of hot's approvals across the pods")
	assert.Equal(t, 0, others(hot.get()), "hot answers other than 200 and 429")
	assert.Positive(t, hot.get()[http.StatusOK])
}
