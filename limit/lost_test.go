package limit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestLostGrantsReportedAgain: a pod that finds that the store lost a key's
// writes (FLUSHALL) reports again what it was granted of the window, so a
// pod that cannot know of the loss (one restarted since) is not granted the
// budget the first one used before it.
func TestLostGrantsReportedAgain(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window = 100, 10*time.Second
		c.LocalFastPath = new(bool) // one permit per call: the store's count is exact
	})
	pods := func() int { return 2 }
	first := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{LivePods: pods})
	req := &Request{IP: []byte("10.9.9.9")}
	before, _ := allowN(first, req, 40)
	require.Equal(t, 40, before)

	cl, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	require.NoError(t, cl.Do(context.Background(), cl.B().Flushall().Build()).Error())

	emptied, reported := storeEmptied.Get(), lostReported.Get()
	after, _ := allowN(first, req, 2) // the first call finds the loss, the next reports
	require.Greater(t, storeEmptied.Get(), emptied, "the loss was not noticed")
	assert.Equal(t, uint64(before), lostReported.Get()-reported, "the permits reported again")

	restarted := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{LivePods: pods})
	got, _ := allowN(restarted, req, 100)
	t.Logf("%d before the loss, %d after it, %d to a pod started after it", before, after, got)
	assert.LessOrEqual(t, before+after+got, 100)
	assert.GreaterOrEqual(t, before+after+got, 98, "the pods were held under the limit")
}
