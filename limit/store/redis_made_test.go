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
