package store

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/limit/redistest"
)

// BenchmarkRedisSlidingLogGrant measures one sliding_log grant by the size
// of the grant: each permit is a sorted-set member that the script writes
// while Redis runs nothing else, which is why the limiter caps sliding_log
// leases well below limits.max_lease (maxLogLease in package limit).
func BenchmarkRedisSlidingLogGrant(b *testing.B) {
	if testing.Short() {
		b.Skip("needs redis-server")
	}
	srv := redistest.Start(b)
	client, err := NewRedisClient(RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	s := NewRedisStore(client, RedisStoreOptions{KeyPrefix: "bench"})
	ctx := context.Background()
	for _, want := range []int64{1, 64, 1000} {
		b.Run("want="+strconv.FormatInt(want, 10), func(b *testing.B) {
			p := Params{Algorithm: SlidingLog, Limit: MaxLimit, Window: time.Minute}
			for i := 0; b.Loop(); i++ {
				key := AppendKeyStrings(nil, "", "bench", strconv.FormatInt(want, 10), strconv.Itoa(i))
				if _, err := s.Lease(ctx, &LeaseRequest{Key: key, Params: p, Want: want, LeaseTTL: time.Second}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
