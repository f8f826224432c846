package catalog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

func startSync(t *testing.T, addr string, resync time.Duration, rules ...Rule) (*Catalog, *Sync) {
	t.Helper()
	cat := testCatalog(t, rules...)
	client, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{addr}})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	s := NewSync(client, cat, SyncOptions{KeyPrefix: "cs", Resync: resync, Logf: t.Logf})
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)
	return cat, s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 1s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCatalogSyncAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	base := Rule{Tenant: "acme", Resource: "bids", Algorithm: store.SlidingWindow, Limit: 10, Window: confutil.Duration(time.Second)}
	catA, syncA := startSync(t, srv.Addr, time.Minute, base)
	catB, _ := startSync(t, srv.Addr, time.Minute, base)
	ctx := context.Background()

	// A write through A reaches B within a second (pub/sub).
	over := Rule{Tenant: "acme", Resource: "bids", Algorithm: store.TokenBucket, Capacity: 3, RefillRate: 1}
	require.NoError(t, syncA.PutRule(ctx, over))
	r, _ := catA.Rule("acme", "bids")
	assert.Equal(t, over, r)
	waitFor(t, "rule on pod B", func() bool { r, _ := catB.Rule("acme", "bids"); return r == over })

	// Tenants too.
	require.NoError(t, syncA.PutTenant(ctx, Tenant{ID: "newco", Plan: "STANDARD", APIKeys: []string{"nk"}}))
	waitFor(t, "tenant on pod B", func() bool { _, ok := catB.LookupAPIKey([]byte("nk")); return ok })
	var ve *ValidationError
	assert.ErrorAs(t, syncA.PutTenant(ctx, Tenant{ID: "thief", Plan: "FREE", APIKeys: []string{"k1"}}), &ve, "a key of another tenant")

	// New pods read the API entries back (restart of every pod).
	catC, syncC := startSync(t, srv.Addr, time.Minute, base)
	r, _ = catC.Rule("acme", "bids")
	assert.Equal(t, over, r)

	// Deleting the API rule restores the config rule everywhere.
	require.NoError(t, syncC.DeleteRule(ctx, "acme", "bids"))
	waitFor(t, "config rule back on A", func() bool { r, _ := catA.Rule("acme", "bids"); return r == base })
	assert.ErrorIs(t, syncC.DeleteRule(ctx, "acme", "bids"), ErrConfigEntry)
	assert.ErrorIs(t, syncC.DeleteRule(ctx, "acme", "nope"), ErrEntryNotFound)
}

func TestCatalogSyncResyncRepairsAMissedMessage(t *testing.T) {
	srv := redistest.Start(t)
	cat, _ := startSync(t, srv.Addr, 100*time.Millisecond)
	client, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(t, err)
	defer client.Close()
	ctx := context.Background()
	// Written as the API writes, but with its message published where no pod
	// listens, as if the message had been lost.
	other := NewSync(client, testCatalog(t), SyncOptions{KeyPrefix: "cs"})
	keys := other.keys()
	gen, _ := client.Do(ctx, client.B().Get().Key(keys[2]).Build()).AsInt64() // missing: 0
	epoch, err := client.Do(ctx, client.B().Get().Key(keys[5]).Build()).ToString()
	if err != nil {
		epoch = "e"
	}
	require.NoError(t, catalogWrite.Exec(ctx, client, keys, []string{fmt.Sprint(gen), "rule", "free:x",
		`{"tenant":"free","resource":"x","algorithm":"sliding_window","limit":4,"window_ms":1000}`,
		"nobody-listens", "rule:free:x", epoch, "100"}).Error())
	waitFor(t, "resync", func() bool { _, ok := cat.Rule("free", "x"); return ok })
}

func TestCatalogSyncRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	_, s := startSync(t, srv.Addr, time.Minute)
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.PutRule(ctx, Rule{Tenant: "acme", Resource: "r", Algorithm: store.TokenBucket, Capacity: 1, RefillRate: 1})
	require.Error(t, err)
	var ve *ValidationError
	assert.NotErrorAs(t, err, &ve, "a store failure is not a validation error")
	srv.Restart()
	require.Eventually(t, func() bool {
		return s.PutRule(context.Background(), Rule{Tenant: "acme", Resource: "r", Algorithm: store.TokenBucket, Capacity: 1, RefillRate: 1}) == nil
	}, 5*time.Second, 50*time.Millisecond)
}

func TestCatalogInProcessWrites(t *testing.T) {
	cat := testCatalog(t)
	w := NewSync(nil, cat, SyncOptions{})
	ctx := context.Background()
	require.NoError(t, w.PutRule(ctx, Rule{Tenant: "acme", Resource: "r", Algorithm: store.SlidingWindow, Limit: 2, Window: confutil.Duration(time.Second)}))
	_, ok := cat.Rule("acme", "r")
	assert.True(t, ok)
	require.NoError(t, w.DeleteRule(ctx, "acme", "r"))
	_, ok = cat.Rule("acme", "r")
	assert.False(t, ok)
	assert.ErrorIs(t, w.DeleteRule(ctx, "acme", "r"), ErrEntryNotFound)
	var ve *ValidationError
	require.ErrorAs(t, w.PutTenant(ctx, Tenant{ID: "x", Plan: PlanFree + "X"}), &ve)
	assert.Equal(t, "plan", ve.Field)
	require.ErrorAs(t, w.PutTenant(ctx, Tenant{ID: "x", Plan: PlanFree, APIKeys: []string{"k1"}}), &ve)
	require.NoError(t, w.PutTenant(ctx, Tenant{ID: "x", Plan: PlanFree, APIKeys: []string{"kx"}}))
	tn, ok := cat.LookupAPIKey([]byte("kx"))
	require.True(t, ok)
	assert.Equal(t, "x", tn.ID)
}

func TestCatalogSyncWithoutRedis(t *testing.T) {
	base := Rule{Tenant: "acme", Resource: "bids", Algorithm: store.SlidingWindow, Limit: 10, Window: confutil.Duration(time.Second)}
	cat := testCatalog(t, base)
	s := NewSync(nil, cat, SyncOptions{})
	require.NoError(t, s.Start(context.Background()))
	defer s.Stop()
	ctx := context.Background()
	over := Rule{Tenant: "acme", Resource: "bids", Algorithm: store.TokenBucket, Capacity: 3, RefillRate: 1}
	require.NoError(t, s.PutRule(ctx, over))
	r, _ := cat.Rule("acme", "bids")
	assert.Equal(t, over, r)
	require.NoError(t, s.DeleteRule(ctx, "acme", "bids"))
	r, _ = cat.Rule("acme", "bids")
	assert.Equal(t, base, r, "the config rule is back")
	assert.ErrorIs(t, s.DeleteRule(ctx, "acme", "bids"), ErrConfigEntry)
}
