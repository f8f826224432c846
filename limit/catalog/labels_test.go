package catalog

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

func labelSetCount() int {
	labelMu.RLock()
	defer labelMu.RUnlock()
	return len(labelSets)
}

func labelSet(tenant, resource string) *Counters {
	labelMu.RLock()
	defer labelMu.RUnlock()
	return labelSets[labelKey{tenant, resource}]
}

// TestLabelsOnlyForKnownNames: unknown resources and tenants share the
// "other" label values; a deleted tenant or rule frees its label sets.
func TestLabelsOnlyForKnownNames(t *testing.T) {
	cat := testCatalog(t)
	defer cat.Close()
	require.NoError(t, cat.Apply([]Change{RulePut(Rule{Tenant: "acme", Resource: "lbl-bids", Algorithm: store.SlidingWindow, Limit: 5, Window: confutil.Duration(time.Second)})}))
	cat.SetRouteResources([]string{"lbl-route"})
	before := labelSetCount()
	var base uint64
	if c := labelSet("acme", labelOther); c != nil {
		base = c.Requests.Get()
	}
	for i := range 2000 {
		CountersFor("acme", fmt.Sprintf("lbl-unknown-%d", i)).Requests.Inc()
		CountersFor(fmt.Sprintf("lbl-nobody-%d", i), "lbl-bids").Requests.Inc()
	}
	assert.LessOrEqual(t, labelSetCount()-before, 2, "(acme, other) and (other, lbl-bids)")
	assert.Equal(t, uint64(2000), labelSet("acme", labelOther).Requests.Get()-base)
	assert.NotNil(t, labelSet(labelOther, "lbl-bids"))
	assert.Same(t, CountersFor("acme", "lbl-route"), labelSet("acme", "lbl-route"), "a route's resource has its labels")
	assert.Same(t, CountersFor("", "lbl-bids"), labelSet(labelAnonymous, "lbl-bids"))

	// Changes publish the names at most every labelDelay: a burst of writes
	// shares one pass over the catalog.
	require.NoError(t, cat.Apply([]Change{TenantPut(Tenant{ID: "lbl-new", Plan: "FREE"})}))
	require.Eventually(t, func() bool {
		CountersFor("lbl-new", "lbl-bids")
		return labelSet("lbl-new", "lbl-bids") != nil
	}, 5*time.Second, 10*time.Millisecond)
	require.Same(t, labelSet("lbl-new", "lbl-bids"), CountersFor("lbl-new", "lbl-bids"), "the pair's counters, now remembered")
	require.NoError(t, cat.Apply([]Change{TenantDelete("lbl-new")}))
	require.Eventually(t, func() bool { return labelSet("lbl-new", "lbl-bids") == nil }, 5*time.Second, 10*time.Millisecond, "freed with its tenant")
	assert.Same(t, labelSet(labelOther, "lbl-bids"), CountersFor("lbl-new", "lbl-bids"), "a freed pair's remembered counters are not served")
	require.NoError(t, cat.Apply([]Change{RuleDelete("acme", "lbl-bids")}))
	require.Eventually(t, func() bool { return labelSet("acme", "lbl-bids") == nil && labelSet(labelAnonymous, "lbl-bids") == nil },
		5*time.Second, 10*time.Millisecond, "freed with the last rule of its resource")
}

// TestCheckLeavesNoLabels: checking a configuration builds no catalog, so
// none of its names stays known as a metric label; NewCatalog's stay until
// Close.
func TestCheckLeavesNoLabels(t *testing.T) {
	knownCatalogs := func() int {
		knownMu.Lock()
		defer knownMu.Unlock()
		return len(knownByCat)
	}
	tenants := []Tenant{{ID: "chk-tenant", Plan: PlanFree, APIKeys: []string{"chk-key"}}}
	rules := []Rule{{Tenant: "chk-tenant", Resource: "chk-res", Algorithm: store.SlidingWindow, Limit: 1, Window: confutil.Duration(time.Second)}}
	before := knownCatalogs()
	require.NoError(t, Check(tenants, rules))
	assert.Equal(t, before, knownCatalogs())
	bad := append(tenants, Tenant{ID: "chk-tenant", Plan: PlanFree})
	assert.EqualError(t, Check(bad, rules), `tenants[1].id: tenant "chk-tenant" is defined twice`)

	cat, err := NewCatalog(nil, tenants, rules)
	require.NoError(t, err)
	assert.Equal(t, before+1, knownCatalogs())
	cat.Close()
	assert.Equal(t, before, knownCatalogs())
}
