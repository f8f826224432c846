package store

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// BenchmarkRedisSlidingLogGrant measures one sliding_log grant by the size
// of the grant: each permit is a sorted-set member that the script writes
// while Redis runs nothing else, which is why the limiter caps sliding_log
// leases well below limits.max_lease (maxLogLease in package limit).
func BenchmarkRedisSlidingLogGrant(b *testing.B) {
	s, _ := benchRedisStore(b)
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

// BenchmarkRedisHotKeyGrant compares the Redis CPU time of one grant on a
// hot key (redis-µs/op, from INFO commandstats: the script's run, without
// the round trip) of each algorithm: sliding_window, whose script reads one
// field of its hash on most calls and every sub-window counter once per
// sub-window, sliding_log, token_bucket, and quota, whose script reads and writes one
// counter. "bare" is the floor: a script that returns at once, given
// sliding_window's keys and arguments (the cost of EVALSHA itself).
func BenchmarkRedisHotKeyGrant(b *testing.B) {
	s, client := benchRedisStore(b)
	ctx := context.Background()
	window := Params{Algorithm: SlidingWindow, Limit: MaxLimit, Window: 200 * time.Millisecond} // 40 sub-windows of 5ms
	for _, c := range []struct {
		name string
		p    Params
	}{
		{"bare", window},
		{"sliding_window", window},
		{"sliding_log", Params{Algorithm: SlidingLog, Limit: MaxLimit, Window: 200 * time.Millisecond}},
		{"token_bucket", Params{Algorithm: TokenBucket, Capacity: MaxLimit, RefillRate: MaxLimit}},
		{"quota", Params{Algorithm: Quota, Limit: MaxLimit, Period: Day}},
	} {
		b.Run(c.name, func(b *testing.B) {
			key := AppendKeyStrings(nil, "", "bench", c.name)
			req := &LeaseRequest{Key: key, Params: c.p, Want: 1, LeaseTTL: 10 * time.Millisecond}
			lease := func() error { _, err := s.Lease(ctx, req); return err }
			if c.name == "bare" {
				lease = func() error { return bareLease(ctx, client, s.prefix, req) }
			}
			calls0, usec0 := scriptStats(b, client)
			for b.Loop() {
				if err := lease(); err != nil {
					b.Fatal(err)
				}
			}
			calls, usec := scriptStats(b, client)
			b.ReportMetric(float64(usec-usec0)/float64(max(calls-calls0, 1)), "redis-µs/op")
		})
	}
}

// BenchmarkRedisSpreadKeysGrant is BenchmarkRedisHotKeyGrant's
// sliding_window over 10k keys, as the check API's 10k-key load calls it
// (bench/check_10k.lua: each key too rare for its lease to be used up, so
// every decision is a store call): a window of 1 s ("live": each key
// comes back while its counters live, or some of them), and of
// 100 ms ("dead": after they have all left the window), with the default
// lease_ttl and a lease of a few permits.
func BenchmarkRedisSpreadKeysGrant(b *testing.B) {
	s, client := benchRedisStore(b)
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		window time.Duration
	}{{"live", time.Second}, {"dead", 100 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) {
			keys := make([][]byte, 10000)
			for i := range keys {
				keys[i] = AppendKeyStrings(nil, "", "bench", c.name, strconv.Itoa(i))
			}
			p := Params{Algorithm: SlidingWindow, Limit: MaxLimit, Window: c.window}
			req := &LeaseRequest{Params: p, Want: 4, LeaseTTL: 250 * time.Millisecond}
			calls0, usec0 := scriptStats(b, client)
			for i := 0; b.Loop(); i++ {
				req.Key = keys[i%len(keys)]
				if _, err := s.Lease(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			calls, usec := scriptStats(b, client)
			b.ReportMetric(float64(usec-usec0)/float64(max(calls-calls0, 1)), "redis-µs/op")
		})
	}
}

// BenchmarkRedisSpreadKeysBatched is the dead row of
// BenchmarkRedisSpreadKeysGrant from 64 goroutines: the calls that come
// while one is on its way go together (redisBatch). Redis' script time is
// per lease, not per script call.
func BenchmarkRedisSpreadKeysBatched(b *testing.B) {
	s, client := benchRedisStore(b)
	ctx := context.Background()
	keys := make([][]byte, 10000)
	for i := range keys {
		keys[i] = AppendKeyStrings(nil, "", "bench", "batched", strconv.Itoa(i))
	}
	p := Params{Algorithm: SlidingWindow, Limit: MaxLimit, Window: 100 * time.Millisecond}
	calls0, usec0 := scriptStats(b, client)
	var next atomic.Int64
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		req := &LeaseRequest{Params: p, Want: 4, LeaseTTL: 250 * time.Millisecond}
		for pb.Next() {
			req.Key = keys[next.Add(1)%int64(len(keys))]
			if _, err := s.Lease(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	calls, usec := scriptStats(b, client)
	b.ReportMetric(float64(usec-usec0)/float64(b.N), "redis-µs/op")
	b.ReportMetric(float64(calls-calls0)/float64(b.N), "calls/op")
}

// bareScript returns at once: what EVALSHA costs Redis before a script does
// anything.
var bareScript = rueidis.NewLuaScript("return {1, 0, 0, 0, 0, 0, 0, 0, 0}")

// bareLease runs bareScript with the keys and arguments of req's script.
func bareLease(ctx context.Context, client rueidis.Client, prefix string, req *LeaseRequest) error {
	c := getRedisCall()
	defer putRedisCall(c)
	c.build(prefix, req, 0, time.Now())
	return bareScript.Exec(ctx, client, c.keys, c.args).Error()
}

// scriptStats reads the calls and microseconds of the scripts Redis has
// run (EVALSHA, and EVAL after a NOSCRIPT) from INFO commandstats.
func scriptStats(t testing.TB, client rueidis.Client) (calls, usec int64) {
	info, err := client.Do(context.Background(), client.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			rest, ok := strings.CutPrefix(line, cmd)
			if !ok {
				continue
			}
			for _, f := range strings.Split(strings.TrimSpace(rest), ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					calls += n
				case "usec":
					usec += n
				}
			}
		}
	}
	return calls, usec
}

// benchRedisStore is a RedisStore on a redis-server of the benchmark's own,
// and its client (for INFO and bare scripts).
func benchRedisStore(b *testing.B) (*RedisStore, rueidis.Client) {
	if testing.Short() {
		b.Skip("needs redis-server")
	}
	client := confClient(b, []string{redistest.Start(b).Addr})
	return NewRedisStore(client, RedisStoreOptions{KeyPrefix: "bench"}), client
}
