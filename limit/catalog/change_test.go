package catalog

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestCatalogChangeMatchesRebuild: a catalog changed one entry at a time
// (overlays, folds) answers exactly as one rebuilt from the same entries:
// rules, tenants, API keys moved between and dropped from tenants, deletes.
func TestCatalogChangeMatchesRebuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cat := testCatalog(t)
	tenants := map[string]Tenant{}
	for _, x := range cat.Tenants() {
		tenants[x.ID] = x
	}
	rules := map[ruleName]Rule{}
	for i := range 3000 {
		var ch Change
		switch op := rng.IntN(10); {
		case op < 5:
			r := Rule{Tenant: "acme", Resource: fmt.Sprintf("r%d", rng.IntN(400)), Algorithm: store.SlidingWindow,
				Limit: int64(i + 1), Window: confutil.Duration(time.Minute)}
			ch, rules[ruleName{r.Tenant, r.Resource}] = RulePut(r), r
		case op < 7:
			n := ruleName{"acme", fmt.Sprintf("r%d", rng.IntN(400))}
			ch = RuleDelete(n.tenant, n.resource)
			delete(rules, n)
		case op < 9:
			id := fmt.Sprintf("t%d", rng.IntN(50))
			x := Tenant{ID: id, Plan: "FREE", APIKeys: []string{fmt.Sprintf("key-%s-%d", id, rng.IntN(3))}}
			ch, tenants[id] = TenantPut(x), x
		default:
			id := fmt.Sprintf("t%d", rng.IntN(50))
			ch = TenantDelete(id)
			delete(tenants, id)
		}
		require.NoError(t, cat.Apply([]Change{ch}), "change %d", i)
	}
	var ts []Tenant
	for _, x := range tenants {
		ts = append(ts, x)
	}
	var rs []Rule
	for _, r := range rules {
		rs = append(rs, r)
	}
	want, err := NewCatalog(map[string]float64{"FREE": 1, "STANDARD": 2, "PREMIUM": 3}, ts, rs)
	require.NoError(t, err)
	assert.Equal(t, want.Rules(), cat.Rules())
	assert.Equal(t, want.Tenants(), cat.Tenants())
	for _, x := range ts {
		for _, k := range x.APIKeys {
			got, ok := cat.LookupAPIKey([]byte(k))
			require.True(t, ok, k)
			assert.Equal(t, x.ID, got.ID)
		}
	}
	for i := range 50 {
		for j := range 3 {
			k := fmt.Sprintf("key-t%d-%d", i, j)
			_, inWant := want.LookupAPIKey([]byte(k))
			_, inGot := cat.LookupAPIKey([]byte(k))
			assert.Equal(t, inWant, inGot, "key %s", k)
		}
	}
	s := cat.snap.Load()
	assert.LessOrEqual(t, len(s.otenants)+len(s.okeys)+len(s.orules), overlayLimit(len(s.tenants)+len(s.rules))+3, "the overlay is folded")

	// A key of another tenant is refused and changes nothing.
	before := cat.snap.Load()
	err = cat.Apply([]Change{TenantPut(Tenant{ID: "thief", Plan: "FREE", APIKeys: []string{"k1"}})})
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Same(t, before, cat.snap.Load())
}

func testCatalog(t testing.TB, rules ...Rule) *Catalog {
	t.Helper()
	c, err := NewCatalog(map[string]float64{"FREE": 1, "STANDARD": 2, "PREMIUM": 3},
		[]Tenant{{ID: "acme", Plan: "PREMIUM", APIKeys: []string{"k1"}}, {ID: "free", Plan: "FREE", APIKeys: []string{"k2"}}},
		rules)
	require.NoError(t, err)
	return c
}
