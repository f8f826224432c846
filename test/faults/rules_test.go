package faults

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// TestFaultRuleWritesAtScale: three pods on one Redis take 10,000 rule PUTs
// through their admin APIs, spread over the pods, while the proxies serve a
// steady load. Every pod ends with every rule, and the entries the pods read
// from Redis stay about one per pod and write (not a re-read of the whole
// catalog per write). The proxies' p99 with and without the
// writes and the writes' wall time are logged, not asserted.
func TestFaultRuleWritesAtScale(t *testing.T) {
	const pods, writes, writers = 3, 10_000, 4
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	cfg := harness.ConfigYAML(up.URL, fmt.Sprintf("redis: {addrs: [%q]}\nlimits: {ip: 0, tenant: 100000000, store_timeout: 2s}\n", srv.Addr))
	gs := make([]*harness.Gateway, pods)
	for i := range gs {
		gs[i] = harness.Start(t, cfg)
	}
	base := ruleCount(t, gs[0])

	load := func(d time.Duration) []time.Duration {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for w := range 2 {
			wg.Go(func() {
				for i := w; time.Now().Before(stop); i++ {
					start := time.Now()
					st := harness.Status("GET", gs[i%pods].URL+"/r", "X-API-Key", "gold-key")
					took := time.Since(start)
					if st != http.StatusOK {
						t.Errorf("proxy answered %d", st)
						return
					}
					mu.Lock()
					lat = append(lat, took)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return lat
	}
	before := p99(load(2 * time.Second))

	read0 := harness.Scrape(t, gs[0].Admin, "sentinel_catalog_entries_read_total")
	var during []time.Duration
	loadDone := make(chan struct{})
	var writing atomic.Bool
	writing.Store(true)
	go func() {
		defer close(loadDone)
		for writing.Load() {
			during = append(during, load(500*time.Millisecond)...)
		}
	}()
	stopLoad := sync.OnceFunc(func() {
		writing.Store(false)
		<-loadDone
	})
	// However the test ends (a failed wait stops it at once), the load
	// stops before it does: a goroutine may not report after its test.
	defer stopLoad()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; i < writes; i += writers {
				body := fmt.Sprintf(`{"algorithm":"sliding_window","limit":%d,"window":"1m"}`, i+1)
				a := harness.Do(t, "PUT", fmt.Sprintf("%s/v1/rules/gold/scale-%d", gs[i%pods].Admin, i), body)
				if a.Status != http.StatusOK {
					t.Errorf("rule %d: %d %s", i, a.Status, a.Body)
					return
				}
			}
		})
	}
	wg.Wait()
	wrote := time.Since(start)
	converged := harness.Eventually(t, 30*time.Second, "every pod has every rule", func() bool {
		for _, g := range gs {
			if ruleCount(t, g) != base+writes {
				return false
			}
		}
		return true
	})
	stopLoad()
	read := harness.Scrape(t, gs[0].Admin, "sentinel_catalog_entries_read_total") - read0
	t.Logf("faults: rules at scale: %d rule PUTs over %d pods (%d writers) in %.1f s (%.0f/s), every pod had all of them %.1f s after the first; %.2f entries read from redis per write (all pods); proxy p99 %.1f ms before, %.1f ms during the writes (%d requests)",
		writes, pods, writers, wrote.Seconds(), float64(writes)/wrote.Seconds(), (converged + wrote).Seconds(),
		read/writes, ms(before), ms(p99(during)), len(during))
	for _, g := range gs {
		a := harness.Do(t, "GET", fmt.Sprintf("%s/v1/rules/gold/scale-%d", g.Admin, writes-1), "")
		require.Equal(t, http.StatusOK, a.Status)
		assert.Equal(t, float64(writes), a.JSON(t)["limit"])
	}
	assert.LessOrEqual(t, read, float64(pods*writes+100), "pods read more than each changed entry once")
}

func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[len(lat)*99/100]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ruleCount is the number of rules g's admin API lists.
func ruleCount(t *testing.T, g *harness.Gateway) int {
	t.Helper()
	a := harness.Do(t, "GET", g.Admin+"/v1/rules", "")
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	var list struct {
		Rules []json.RawMessage `json:"rules"`
	}
	require.NoError(t, json.Unmarshal(a.Body, &list))
	return len(list.Rules)
}
