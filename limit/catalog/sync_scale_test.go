package catalog

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestCatalogSyncAtScale: three pods on one Redis (and on a 3-node cluster)
// take rule writes spread over them; every pod ends with every rule, a
// delete reaches every pod, and the entries the pods read from Redis per
// write stay a constant (each pod reads each changed entry once), instead
// of the whole catalog per write.
func TestCatalogSyncAtScale(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		catalogAtScale(t, []string{srv.Addr}, 10_000)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		catalogAtScale(t, c.Addrs, 2_000)
	})
}

func catalogAtScale(t *testing.T, addrs []string, writes int) {
	const pods = 3
	cats := make([]*Catalog, pods)
	syncs := make([]*Sync, pods)
	for i := range pods {
		cats[i] = testCatalog(t)
		client, err := store.NewRedisClient(store.RedisConfig{Addrs: addrs})
		require.NoError(t, err)
		t.Cleanup(client.Close)
		syncs[i] = NewSync(client, cats[i], SyncOptions{KeyPrefix: "scale", Resync: time.Second, Logf: t.Logf})
		require.NoError(t, syncs[i].Start(context.Background()))
		t.Cleanup(syncs[i].Stop)
	}
	base := len(cats[0].Rules())
	read0 := syncEntriesRead.Get()
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	for p := range pods {
		wg.Go(func() {
			for i := p; i < writes; i += pods {
				r := Rule{Tenant: "acme", Resource: fmt.Sprintf("scale-%d", i), Algorithm: store.SlidingWindow,
					Limit: int64(i + 1), Window: confutil.Duration(time.Minute)}
				if err := syncs[p].PutRule(context.Background(), r); err != nil {
					t.Errorf("pod %d, rule %d: %v", p, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	wrote := time.Since(start)
	deadline := time.Now().Add(30 * time.Second)
	for p := range pods {
		for len(cats[p].Rules()) != base+writes {
			require.True(t, time.Now().Before(deadline), "pod %d has %d of %d rules", p, len(cats[p].Rules())-base, writes)
			time.Sleep(20 * time.Millisecond)
		}
		r, ok := cats[p].Rule("acme", fmt.Sprintf("scale-%d", writes-1))
		require.True(t, ok)
		assert.Equal(t, int64(writes), r.Limit)
	}
	converged := time.Since(start)
	read := syncEntriesRead.Get() - read0
	cpu := cpuTime() - cpu0
	t.Logf("catalog at scale: %d rule writes over %d pods in %.1f s (all pods converged at %.1f s); %.2f entries read from redis per write (all pods); process CPU %.1f s",
		writes, pods, wrote.Seconds(), converged.Seconds(), float64(read)/float64(writes), cpu.Seconds())
	assert.LessOrEqual(t, read, uint64(pods*writes+100), "pods read more than each changed entry once")

	require.NoError(t, syncs[0].DeleteRule(context.Background(), "acme", "scale-0"))
	for p := range pods {
		for {
			if _, ok := cats[p].Rule("acme", "scale-0"); !ok {
				break
			}
			require.True(t, time.Now().Before(deadline), "pod %d still has the deleted rule", p)
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// cpuTime is the CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
