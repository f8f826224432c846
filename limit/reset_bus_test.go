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

// TestPublishReachesEveryPod: a reset published through one pod is heard by
// every pod, the publisher too, within a second; without Redis the process
// hears it at once.
func TestPublishReachesEveryPod(t *testing.T) {
	srv := redistest.Start(t)
	heard := make(chan string, 8)
	var buses []*ResetBus
	for range 3 {
		client, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
		require.NoError(t, err)
		t.Cleanup(client.Close)
		b := NewResetBus(client, "t", func(key string) { heard <- key })
		b.Start()
		t.Cleanup(b.Stop)
		buses = append(buses, b)
	}
	start := time.Now()
	require.NoError(t, buses[1].Publish(context.Background(), "{ip:10.0.0.1}"))
	for i := range 3 {
		select {
		case k := <-heard:
			assert.Equal(t, "{ip:10.0.0.1}", k)
		case <-time.After(time.Second):
			t.Fatalf("%d of 3 pods heard the reset within 1s", i)
		}
	}
	t.Logf("every pod heard the reset after %v", time.Since(start).Round(time.Millisecond))

	var local []string
	b := NewResetBus(nil, "", func(key string) { local = append(local, key) })
	b.Start()
	require.NoError(t, b.Publish(context.Background(), "{tenant:acme}"))
	assert.Equal(t, []string{"{tenant:acme}"}, local)
	b.Stop()
}
