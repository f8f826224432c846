//go:build !race

package store

import (
	"context"
	"testing"
	"time"
)

// TestMemoryStoreLeaseAllocs: a lease on a key the store already holds
// allocates nothing.
func TestMemoryStoreLeaseAllocs(t *testing.T) {
	s := NewMemoryStore(MemoryOptions{})
	defer s.Close()
	ctx := context.Background()
	for _, p := range []Params{
		{Algorithm: SlidingWindow, Limit: 1 << 39, Window: time.Second},
		{Algorithm: TokenBucket, Capacity: 1 << 39, RefillRate: 1e9},
		{Algorithm: Quota, Limit: 1 << 39, Period: Day, Zone: time.FixedZone("test", 3600)},
	} {
		req := &LeaseRequest{Key: []byte("{tenant:acme}"), Params: p, Want: 1, LeaseTTL: 100 * time.Millisecond}
		for i := 0; i < 100; i++ { // warm up: the key and its sub-windows exist
			_, _ = s.Lease(ctx, req)
		}
		if n := testing.AllocsPerRun(1000, func() { _, _ = s.Lease(ctx, req) }); n != 0 {
			t.Errorf("algorithm %d: Lease allocates %v times", p.Algorithm, n)
		}
	}
}
