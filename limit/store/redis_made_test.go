package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// TestRedisMadeAgoTellsAKeyMadeAnew: the window scripts say how long ago
// they made a key (LeaseResult.MadeAgo). An emptied store makes it anew,
// numbered from 1 and made now; an older copy of the key put back (a
// replica promoted before it had the last writes) keeps the time it was
// made, though its numbers go back.
func TestRedisMadeAgoTellsAKeyMadeAnew(t *testing.T) {
	client := confClient(t, []string{redistest.Start(t).Addr})
	ctx := context.Background()
	s := NewRedisStore(client, RedisStoreOptions{KeyPrefix: "made"})
	for _, alg := range []Algorithm{SlidingWindow, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			req := &LeaseRequest{Key: []byte("k:" + alg.String()), Params: Params{Algorithm: alg, Limit: 100, Window: time.Minute}, Want: 1}
			lease := func() LeaseResult {
				res, err := s.Lease(ctx, req)
				require.NoError(t, err)
				require.Equal(t, int64(1), res.Granted)
				return res
			}
			first := lease()
			assert.Equal(t, int64(1), first.Seq)
			assert.Less(t, first.MadeAgo, 5*time.Millisecond)
			if alg == SlidingWindow {
				// The time is a field of its own: "t" keeps the form that
				// the script of the last release reads ("T N LO HI V"), so
				// that pods of both can share a store during an upgrade.
				h, err := client.Do(ctx, client.B().Hgetall().Key("made:"+string(req.Key)+suffixSlidingWindow).Build()).AsStrMap()
				require.NoError(t, err)
				assert.Regexp(t, `^\d+ \d+ \d+ \d+ \d+$`, h["t"])
				assert.Regexp(t, `^\d+$`, h["m"])
			}

			copyOf := dumpAll(t, client)
			time.Sleep(30 * time.Millisecond)
			second := lease()
			assert.Equal(t, int64(2), second.Seq)
			assert.GreaterOrEqual(t, second.MadeAgo, 30*time.Millisecond)

			require.NoError(t, client.Do(ctx, client.B().Flushall().Build()).Error())
			anew := lease()
			assert.Equal(t, int64(1), anew.Seq, "emptied: numbered from 1")
			assert.Less(t, anew.MadeAgo, 5*time.Millisecond, "emptied: made now")

			require.NoError(t, client.Do(ctx, client.B().Flushall().Build()).Error())
			restoreAll(t, client, copyOf)
			behind := lease()
			assert.Equal(t, int64(2), behind.Seq, "an older copy: numbered from its own")
			assert.GreaterOrEqual(t, behind.MadeAgo, 30*time.Millisecond, "an older copy: made when the key was")
			require.NoError(t, client.Do(ctx, client.B().Flushall().Build()).Error())
		})
	}
}

// dumpAll returns every key of the node with its DUMP.
func dumpAll(t *testing.T, client rueidis.Client) map[string]string {
	ctx := context.Background()
	keys, err := client.Do(ctx, client.B().Keys().Pattern("*").Build()).AsStrSlice()
	require.NoError(t, err)
	out := map[string]string{}
	for _, k := range keys {
		v, err := client.Do(ctx, client.B().Dump().Key(k).Build()).ToString()
		require.NoError(t, err)
		out[k] = v
	}
	return out
}

// restoreAll puts back keys that dumpAll returned.
func restoreAll(t *testing.T, client rueidis.Client, keys map[string]string) {
	ctx := context.Background()
	for k, v := range keys {
		require.NoError(t, client.Do(ctx, client.B().Restore().Key(k).Ttl(0).SerializedValue(v).Replace().Build()).Error())
	}
}

// TestTokenBucketMadeAnewAtTheCallersLevel: a token bucket that a store
// makes anew while its caller's last answer is younger than the time it
// takes to refill (LeaseRequest.Level) starts at that answer's level plus
// the refill since, not full: Redis emptied, and the in-process store
// alike. A key that exists, or a level refilled past the capacity, is not
// changed by it.
func TestTokenBucketMadeAnewAtTheCallersLevel(t *testing.T) {
	client := confClient(t, []string{redistest.Start(t).Addr})
	ctx := context.Background()
	mem := NewMemoryStore(MemoryOptions{})
	t.Cleanup(mem.Close)
	for _, st := range []struct {
		name  string
		s     Store
		empty func()
	}{
		{"redis", NewRedisStore(client, RedisStoreOptions{KeyPrefix: "level"}), func() {
			require.NoError(t, client.Do(ctx, client.B().Flushall().Build()).Error())
		}},
		{"memory", mem, nil},
	} {
		t.Run(st.name, func(t *testing.T) {
			// A token in 1,000 s: the test's own time refills nothing.
			p := Params{Algorithm: TokenBucket, Capacity: 100, RefillRate: 0.001}
			lease := func(key string, want int64, level int64, ago time.Duration) LeaseResult {
				res, err := st.s.Lease(ctx, &LeaseRequest{Key: []byte(key), Params: p, Want: want, Need: 1,
					Level: level, LevelAgo: ago, LevelKnown: level >= 0})
				require.NoError(t, err)
				return res
			}
			// A key that exists keeps its own level.
			assert.EqualValues(t, 80, lease("kept", 80, -1, 0).Granted)
			assert.EqualValues(t, 20, lease("kept", 100, 90, 0).Granted, "an existing key took the caller's level")
			// A key made anew starts at the caller's level plus the refill since.
			if st.empty != nil {
				st.empty()
			}
			res := lease("lost", 100, 15, 5000*time.Second)
			assert.EqualValues(t, 20, res.Granted, "15 left 5,000 s ago, refilled at 1 in 1,000 s")
			assert.EqualValues(t, 0, res.Remaining)
			// Refilled past the capacity: full.
			assert.EqualValues(t, 100, lease("refilled", 100, 90, 20_000*time.Second).Granted)
		})
	}
}
