package catalog

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

func TestRuleValidateNamesEveryBadKey(t *testing.T) {
	r := Rule{Tenant: "a b", Resource: "", Algorithm: store.SlidingWindow, Limit: 0, Capacity: 3}
	err := r.Validate("rules[2]")
	require.Error(t, err)
	for _, want := range []string{"rules[2].tenant:", "rules[2].resource:", "rules[2].limit: missing: a limit of 1..1000000000000 is required",
		"rules[2].window: required for sliding_window", "rules[2].capacity: capacity and refill_rate apply to token_bucket only"} {
		assert.Contains(t, err.Error(), want)
	}
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "rules[2].tenant", ve.Field, "the API answers the first bad field")
}

func TestPlansDefaultAndValidate(t *testing.T) {
	assert.Equal(t, Plans{PlanFree: 1, PlanStandard: 2, PlanPremium: 3}, DefaultPlans())
	c, err := NewCatalog(nil, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 2.0, c.PlanMultiplier(PlanStandard), "one default set: the documented one")
	assert.Equal(t, 3.0, c.PlanMultiplier(PlanPremium))

	err = Plans{PlanFree: -1, "GOLD": 2, PlanPremium: 3}.Validate()
	require.Error(t, err)
	for _, want := range []string{"plans.FREE: multiplier -1", "plans.GOLD: unknown plan", "plans.STANDARD: missing"} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestCatalogErrorsNameEveryBadEntry: a catalog that does not build names
// every bad tenant and rule.
func TestCatalogErrorsNameEveryBadEntry(t *testing.T) {
	_, err := NewCatalog(nil,
		[]Tenant{{ID: "a", Plan: "GOLD"}, {ID: "b", Plan: PlanFree, APIKeys: []string{" k"}}},
		[]Rule{{Tenant: "a", Resource: "r", Algorithm: store.TokenBucket}})
	require.Error(t, err)
	for _, want := range []string{"tenants[0].plan", "tenants[1].api_keys[0]", "rules[0].capacity"} {
		assert.Contains(t, err.Error(), want)
	}
}
