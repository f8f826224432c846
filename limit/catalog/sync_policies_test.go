package catalog

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

var policyDefaults = Defaults{Algorithm: store.SlidingWindow, Window: time.Second}

// filePolicy is the configuration file's policy of the tests.
var filePolicy = Policy{Name: "per-ip", Key: []string{"ip"}, Limits: []PolicyLimit{{Limit: 10}}}

// startPolicySync is a started pod's sync with filePolicy as its file's
// policies.
func startPolicySync(t *testing.T, addr string, resync time.Duration) (*Catalog, *Sync) {
	t.Helper()
	cat := testCatalog(t)
	client, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{addr}})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	s := NewSync(client, cat, SyncOptions{KeyPrefix: "cs", Resync: resync, Logf: t.Logf})
	require.NoError(t, s.SetPolicyBase([]Policy{filePolicy}, policyDefaults))
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)
	return cat, s
}

// policyNames lists the names of the policies s's limiters decide with.
func policyNames(s *Sync) []string {
	var out []string
	for _, p := range s.PolicySet().All() {
		out = append(out, p.Name)
	}
	return out
}

func TestPoliciesAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	_, a := startPolicySync(t, srv.Addr, time.Minute)
	_, b := startPolicySync(t, srv.Addr, time.Minute)
	ctx := context.Background()

	// A write through A reaches B within a second, reading that entry only.
	p := Policy{Name: "daily", Key: []string{"tenant"}, Limits: []PolicyLimit{{Limit: 500, Period: store.Day}}}
	read := syncEntriesRead.Get()
	start := time.Now()
	created, err := a.PutPolicy(ctx, p)
	require.NoError(t, err)
	assert.True(t, created)
	waitFor(t, "policy on pod B", func() bool { _, ok := b.Policy("daily"); return ok })
	t.Logf("policy on pod B after %v", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, []string{"per-ip", "daily"}, policyNames(b), "the file's first, then the API's")
	assert.Equal(t, uint64(1), syncEntriesRead.Get()-read, "pod B read the changed entry only")
	got, _ := b.Policy("daily")
	assert.Equal(t, OriginAPI, got.Origin)

	// An API policy of a file policy's name overrides it; deleting it brings
	// the file's back, and the file's cannot be deleted.
	over := Policy{Name: "per-ip", Key: []string{"ip"}, Limits: []PolicyLimit{{Limit: 3}}}
	_, err = b.PutPolicy(ctx, over)
	require.NoError(t, err)
	waitFor(t, "override on pod A", func() bool { e, _ := a.Policy("per-ip"); return e.Origin == OriginAPI })
	assert.Equal(t, int64(3), compiledPolicy(t, b, "per-ip").Params[0].Limit)
	require.NoError(t, a.DeletePolicy(ctx, "per-ip"))
	waitFor(t, "file policy back on pod B", func() bool { e, _ := b.Policy("per-ip"); return e.Origin == OriginFile })
	assert.Equal(t, int64(10), compiledPolicy(t, b, "per-ip").Params[0].Limit)
	assert.ErrorIs(t, a.DeletePolicy(ctx, "per-ip"), ErrConfigEntry)
	assert.ErrorIs(t, a.DeletePolicy(ctx, "nope"), ErrEntryNotFound)

	// A new pod reads the API's policies back; a reload of the file keeps them.
	_, c := startPolicySync(t, srv.Addr, time.Minute)
	assert.Equal(t, []string{"per-ip", "daily"}, policyNames(c))
	require.NoError(t, c.SetPolicyBase(nil, policyDefaults))
	assert.Equal(t, []string{"daily"}, policyNames(c), "the file's policy went with the file; the API's stayed")

	require.NoError(t, b.DeletePolicy(ctx, "daily"))
	waitFor(t, "delete on pod A", func() bool { _, ok := a.Policy("daily"); return !ok })
}

// compiledPolicy is the compiled policy name of s.
func compiledPolicy(t *testing.T, s *Sync, name string) *CompiledPolicy {
	t.Helper()
	for _, p := range s.PolicySet().All() {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no policy %s", name)
	return nil
}

// TestPoliciesRestoredAfterRedisLosesData: the API's policies come back
// with the rest of the catalog when Redis restarts empty.
func TestPoliciesRestoredAfterRedisLosesData(t *testing.T) {
	srv := redistest.Start(t)
	_, a := startPolicySync(t, srv.Addr, 200*time.Millisecond)
	_, b := startPolicySync(t, srv.Addr, 200*time.Millisecond)
	ctx := context.Background()
	_, err := a.PutPolicy(ctx, Policy{Name: "burst", Key: []string{"api_key"}, Limits: []PolicyLimit{{Limit: 5}}})
	require.NoError(t, err)
	require.NoError(t, a.PutRule(ctx, Rule{Tenant: "acme", Resource: "r", Algorithm: store.SlidingWindow, Limit: 2, Window: confutil.Duration(time.Second)}))
	waitFor(t, "policy on pod B", func() bool { return len(policyNames(b)) == 2 })

	srv.Restart()
	client, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(t, err)
	defer client.Close()
	require.Eventually(t, func() bool {
		names, err := client.Do(ctx, client.B().Hkeys().Key("cs:{catalog}:policies").Build()).AsStrSlice()
		rules, _ := client.Do(ctx, client.B().Hkeys().Key("cs:{catalog}:rules").Build()).AsStrSlice()
		return err == nil && len(names) == 1 && names[0] == "burst" && len(rules) == 1
	}, 3*time.Second, 10*time.Millisecond, "redis holds the policy and the rule again")
	time.Sleep(500 * time.Millisecond) // more resyncs on each pod
	assert.Equal(t, []string{"per-ip", "burst"}, policyNames(b))
}

// TestPolicyChangesMatchRebuild: a pod that follows random policy and rule
// writes through the change log ends with the same policies as the writer
// and as a new pod that reads the whole catalog.
func TestPolicyChangesMatchRebuild(t *testing.T) {
	srv := redistest.Start(t)
	_, a := startPolicySync(t, srv.Addr, time.Minute)
	catB, b := startPolicySync(t, srv.Addr, time.Minute)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		name := fmt.Sprintf("p%d", rng.IntN(20))
		if rng.IntN(10) == 0 {
			name = filePolicy.Name
		}
		switch op := rng.IntN(10); {
		case op < 6:
			p := Policy{Name: name, Key: []string{"ip"}, Limits: []PolicyLimit{{Limit: int64(i + 1)}}}
			_, err := a.PutPolicy(ctx, p)
			require.NoError(t, err)
		case op < 9:
			if err := a.DeletePolicy(ctx, name); err != nil {
				require.True(t, err == ErrConfigEntry || err == ErrEntryNotFound, "%v", err)
			}
		default:
			r := Rule{Tenant: "acme", Resource: name, Algorithm: store.SlidingWindow, Limit: int64(i + 1), Window: confutil.Duration(time.Second)}
			require.NoError(t, a.PutRule(ctx, r))
		}
	}
	waitFor(t, "pod B follows", func() bool { return fmt.Sprint(a.Policies()) == fmt.Sprint(b.Policies()) })
	catC, c := startPolicySync(t, srv.Addr, time.Minute)
	assert.Equal(t, a.Policies(), c.Policies())
	assert.Equal(t, policyNames(c), policyNames(b))
	assert.Equal(t, catC.Rules(), catB.Rules())
}
