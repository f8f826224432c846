package faults

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentinel-gateway/sentinel/test/harness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestFaultKeyFloodKeepsExhaustedCounters: a gateway on the in-memory store
// (limits.max_keys at its default) with an IP limit of 10 per hour. 200
// clients use up their limit (one of them over HTTP), then 2,000,000
// distinct keys flood the same store. Every one of the 200 is still
// refused, the store holds no more than max_keys keys, and the flood gets
// no more than the room that was left plus one limit.
func TestFaultKeyFloodKeepsExhaustedCounters(t *testing.T) {
	const limitPerHour, held, flood = 10, 200, 2_000_000
	up := harness.StartUpstream(t)
	const maxKeys = 100_000 // limits.max_keys' default
	mem := store.NewMemoryStore(store.MemoryOptions{MaxKeys: maxKeys})
	g := harness.StartWith(t, `
server: {admin_listen: "127.0.0.1:0", trusted_proxies: ["127.0.0.1/32"]}
limits: {ip: `+strconv.Itoa(limitPerHour)+`, window: 1h}
upstreams:
  api: {targets: ["`+up.URL+`"]}
routes:
  - {path_prefix: /, upstream: api}
`, harness.Options{Store: mem})
	ctx := context.Background()

	for range limitPerHour {
		require.Equal(t, 200, harness.Status("GET", g.URL+"/x"))
	}
	require.Equal(t, 429, harness.Status("GET", g.URL+"/x"))
	ips := make([]string, held-1)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.1.%d.%d", i/250, i%250)
		for range limitPerHour {
			require.Equal(t, 200, harness.Status("GET", g.URL+"/x", "X-Forwarded-For", ips[i]))
		}
		require.Equal(t, 429, harness.Status("GET", g.URL+"/x", "X-Forwarded-For", ips[i]))
	}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	var granted atomic.Int64
	var wg sync.WaitGroup
	const workers = 2
	for w := range workers {
		wg.Go(func() {
			req := &store.LeaseRequest{
				Params: store.Params{Algorithm: store.SlidingWindow, Limit: limitPerHour, Window: time.Hour},
				Want:   1, LeaseTTL: 250 * time.Millisecond,
			}
			var buf, ip []byte
			n := int64(0)
			for i := w; i < flood; i += workers {
				ip = strconv.AppendInt(append(ip[:0], "flood-"...), int64(i), 10)
				req.Key = store.AppendKey(buf[:0], "", "ip", ip)
				buf = req.Key
				r, err := mem.Lease(ctx, req)
				if err != nil {
					panic(err)
				}
				n += r.Granted
			}
			granted.Add(n)
		})
	}
	wg.Wait()
	took := time.Since(start)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)

	refused := 0
	if harness.Status("GET", g.URL+"/x") == 429 {
		refused++
	}
	for _, ip := range ips {
		if harness.Status("GET", g.URL+"/x", "X-Forwarded-For", ip) == 429 {
			refused++
		}
	}
	overflow := harness.Scrape(t, g.Admin, "sentinel_limit_memory_overflow_decisions_total")
	keys := mem.Len()
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("faults: key flood: %d of %d exhausted clients still refused after %d distinct keys (%.1f s, %.0f keys/s); store holds %d keys (max_keys %d); flood granted %d; overflow decisions %.0f; heap %+.1f MB (%.0f B per key held)",
		refused, held, flood, took.Seconds(), float64(flood)/took.Seconds(), keys, maxKeys, granted.Load(), overflow,
		float64(growth)/(1<<20), float64(growth)/float64(max(keys, 1)))
	assert.Equal(t, held, refused, "exhausted counters were forgotten under the flood")
	assert.LessOrEqual(t, keys, maxKeys)
	assert.LessOrEqual(t, granted.Load(), int64(maxKeys-held+limitPerHour), "the flood got more than the room left and one limit")
	assert.Positive(t, overflow)
	assert.Less(t, growth, int64(maxKeys)*2048, "the store's memory is not bounded by max_keys")
}
