package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// TestSlidingWindowNewKeyAnswersAsTheFullScript: sliding_window.lua
// answers a call for a key with no hash by a short path; the same call
// with one empty report of earlier permits (0 permits, which count for
// nothing) takes the full path. Both must answer alike and leave the same
// hash, with the same expiry, for every kind of call: granted whole,
// partially, not at all (need over the limit, a zero limit, past its
// deadline), with the lease's and the used permits' fields the same or
// not.
func TestSlidingWindowNewKeyAnswersAsTheFullScript(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	client := confClient(t, []string{redistest.Start(t).Addr})
	ctx := context.Background()
	type call struct {
		limit, window, want, lease, g, need, deadline, useWithin int64
	}
	past := int64(1) // microseconds since the epoch: every call runs after it
	calls := []call{
		{limit: 100, window: 1000, want: 4, lease: 250, g: 5, need: 1},
		{limit: 100, window: 1000, want: 1, lease: 250, g: 5, need: 1},
		{limit: 3, window: 1000, want: 8, lease: 250, g: 5, need: 2},
		{limit: 100, window: 1000, want: 4, lease: 0, g: 1000, need: 1},
		{limit: 100, window: 60000, want: 6, lease: 250, g: 1500, need: 2, useWithin: 30},
		{limit: 100, window: 1000, want: 6, lease: 10, g: 5, need: 2, useWithin: 30},
		{limit: 2, window: 1000, want: 4, lease: 250, g: 5, need: 3},
		{limit: 0, window: 1000, want: 1, lease: 250, g: 5, need: 1},
		{limit: 100, window: 1000, want: 4, lease: 250, g: 5, need: 1, deadline: past},
		{limit: 100, window: 1000, want: 0, lease: 250, g: 5, need: 1},
	}
	args := func(c call, full bool) []string {
		a := []string{
			fmt.Sprint(c.limit), fmt.Sprint(c.window), fmt.Sprint(c.want), fmt.Sprint(c.lease),
			fmt.Sprint(c.g), fmt.Sprint(c.need), "0", "0", fmt.Sprint(c.deadline), "0", "0", "0",
			fmt.Sprint(c.useWithin),
		}
		if full {
			a = append(a, "0", "0")
		}
		return a
	}
	read := func(key string, res rueidis.RedisResult) (rueidis.RedisMessage, map[string]string, int64) {
		require.NoError(t, res.Error())
		msg, _ := res.ToMessage()
		h, err := client.Do(ctx, client.B().Hgetall().Key(key).Build()).AsStrMap()
		require.NoError(t, err)
		ttl, err := client.Do(ctx, client.B().Pttl().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		return msg, h, ttl
	}
	for i, c := range calls {
		// The two calls compare only when Redis' clock gave both the same
		// millisecond (the fields are times): they are sent in one
		// pipeline, and again until they do.
		for try := 0; ; try++ {
			require.Less(t, try, 100, "call %d: never two calls in one millisecond", i)
			fastKey, fullKey := fmt.Sprintf("fresh:fast:%d:%d", i, try), fmt.Sprintf("fresh:full:%d:%d", i, try)
			res := slidingWindowScript.one.ExecMulti(ctx, client,
				rueidis.LuaExec{Keys: []string{fastKey}, Args: args(c, false)},
				rueidis.LuaExec{Keys: []string{fullKey}, Args: args(c, true)})
			fast, fastHash, fastTTL := read(fastKey, res[0])
			full, fullHash, fullTTL := read(fullKey, res[1])
			if now(fastHash) != now(fullHash) {
				continue
			}
			a, err := fast.ToArray()
			require.NoError(t, err)
			b, err := full.ToArray()
			require.NoError(t, err)
			require.Len(t, a, len(b))
			for j := range a {
				if j == 6 {
					continue // now_us
				}
				x, _ := a[j].AsInt64()
				y, _ := b[j].AsInt64()
				assert.Equal(t, y, x, "call %d %+v: answer %d", i, c, j)
			}
			assert.Equal(t, fullHash, fastHash, "call %d %+v: the hash", i, c)
			assert.InDelta(t, fullTTL, fastTTL, 5, "call %d: expiry", i)
			break
		}
	}
}

// now is the time (ms) in a sliding_window hash's field "t".
func now(h map[string]string) string {
	n, _, _ := strings.Cut(h["t"], " ")
	return n
}
