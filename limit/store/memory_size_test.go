package store

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestMemoryStoreBytesPerKey measures the heap a key of the in-memory store
// takes, over 100,000 keys of a header policy (each granted one permit of 5
// per hour, as a flood of user IDs would be), for each algorithm. The
// figure is the one docs/performance.md and docs/configuration.md give for
// limits.max_keys: `go test -run TestMemoryStoreBytesPerKey -v ./limit/store/`.
func TestMemoryStoreBytesPerKey(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, SlidingLog, TokenBucket, Quota} {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			const keys = 100_000
			clock := newConfClock()
			p := confParams(alg, 5, time.Hour)
			if alg == Quota {
				p = Params{Algorithm: Quota, Limit: 5, Period: Day}
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: 2 * keys, SweepInterval: time.Hour})
			defer s.Close()
			req := &LeaseRequest{Params: p, Want: 1, Need: 1}
			var buf, id []byte
			for i := range keys {
				id = strconv.AppendInt(append(id[:0], "user-"...), int64(1_000_000+i), 10)
				req.Key = AppendKey(buf[:0], "sentinel", "p", []byte("per-user"), id)
				buf = req.Key
				if _, err := s.Lease(t.Context(), req); err != nil {
					t.Fatal(err)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			per := float64(after.HeapAlloc-before.HeapAlloc) / keys
			t.Logf("memory store, %v: %d keys (key %d bytes), %.0f B per key", alg, s.Len(), len(req.Key), per)
			assert.Equal(t, keys, s.Len())
			assert.Less(t, per, 300.0, "a key takes more than docs/configuration.md says")
			runtime.KeepAlive(s)
		})
	}
}
