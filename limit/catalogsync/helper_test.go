package catalogsync

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
)

// testCatalog is a catalog with the plans, the tenants acme (PREMIUM, key
// k1) and free (FREE, key k2), and rules.
func testCatalog(t testing.TB, rules ...catalog.Rule) *catalog.Catalog {
	t.Helper()
	c, err := catalog.NewCatalog(map[string]float64{"FREE": 1, "STANDARD": 2, "PREMIUM": 3},
		[]catalog.Tenant{{ID: "acme", Plan: "PREMIUM", APIKeys: []string{"k1"}}, {ID: "free", Plan: "FREE", APIKeys: []string{"k2"}}},
		rules)
	require.NoError(t, err)
	return c
}
