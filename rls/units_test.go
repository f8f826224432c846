package rls

import (
	"context"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// unitCase is a policy of 50 per window or period on resource res, and the
// limit ShouldRateLimit must state for it.
type unitCase struct {
	res     string
	window  time.Duration
	period  store.Period
	unit    rlsv3.RateLimitResponse_RateLimit_Unit
	perUnit uint32
	name    string
}

var unitCases = []unitCase{
	{"second", time.Second, store.NoPeriod, rlsv3.RateLimitResponse_RateLimit_SECOND, 50, "policy p-second 50/1s"},
	{"minute", time.Minute, store.NoPeriod, rlsv3.RateLimitResponse_RateLimit_MINUTE, 50, "policy p-minute 50/1m"},
	{"two-seconds", 2 * time.Second, store.NoPeriod, rlsv3.RateLimitResponse_RateLimit_MINUTE, 1500, "policy p-two-seconds 50/2s"},
	{"hour", time.Hour, store.NoPeriod, rlsv3.RateLimitResponse_RateLimit_HOUR, 50, "policy p-hour 50/1h"},
	{"day", 0, store.Day, rlsv3.RateLimitResponse_RateLimit_DAY, 50, "policy p-day 50/1d"},
	{"week", 0, store.Week, rlsv3.RateLimitResponse_RateLimit_WEEK, 50, "policy p-week 50/7d"},
	{"month", 0, store.Month, rlsv3.RateLimitResponse_RateLimit_MONTH, 50, "policy p-month 50/"},
	{"year", 0, store.Year, rlsv3.RateLimitResponse_RateLimit_YEAR, 50, "policy p-year 50/"},
}

// TestPolicyLimitInItsUnit: a policy's limit is stated in the smallest
// Envoy unit that holds its window, a calendar week, month or year being
// one WEEK, MONTH or YEAR, with the true count (a 2s window scaled to the
// MINUTE), the policy's name in the status name, and a duration_until_reset
// within the window, on a fresh budget and after a hit, on the in-memory
// store and on redis-server.
func TestPolicyLimitInItsUnit(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		checkUnits(t, store.NewMemoryStore(store.MemoryOptions{}))
	})
	t.Run("redis", func(t *testing.T) {
		if testing.Short() {
			t.Skip("needs redis-server")
		}
		checkUnits(t, redisStore(t, "units"))
	})
}

func checkUnits(t *testing.T, st store.Store) {
	var cfg limit.Config
	cfg.SetDefaults()
	cfg.StoreTimeout = time.Second // the race detector slows every call
	policies := make([]catalog.Policy, 0, len(unitCases))
	for _, u := range unitCases {
		pl := catalog.PolicyLimit{Limit: 50, Window: confutil.Duration(u.window), Period: u.period}
		policies = append(policies, catalog.Policy{Name: "p-" + u.res, Match: catalog.PolicyMatch{Resources: []string{u.res}}, Key: []string{"tenant"}, Limits: catalog.PolicyLimits{pl}})
	}
	ps, err := catalog.CompilePolicies(policies, cfg.CatalogDefaults())
	require.NoError(t, err)
	cat, err := catalog.NewCatalog(nil, nil, nil)
	require.NoError(t, err)
	lim, err := limit.NewLimiter(cfg, st, limit.Options{Catalog: cat, Policies: ps})
	require.NoError(t, err)
	t.Cleanup(lim.Close)
	c := rlsv3.NewRateLimitServiceClient(start(t, Config{}, lim, cat))
	for _, u := range unitCases {
		for call := range 2 {
			resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
				Descriptors: []*commonv3.RateLimitDescriptor{descriptor("tenant", "acme", "resource", u.res)}})
			require.NoError(t, err, u.res)
			s := resp.Statuses[0]
			require.NotNil(t, s.CurrentLimit, u.res)
			assert.Equal(t, u.unit, s.CurrentLimit.Unit, u.res)
			assert.Equal(t, u.perUnit, s.CurrentLimit.RequestsPerUnit, u.res)
			assert.Contains(t, s.CurrentLimit.Name, u.name, u.res)
			assert.Equal(t, uint32(49-call), s.LimitRemaining, u.res)
			longest, _ := longestUnit(u.unit)
			if u.window > 0 {
				longest = u.window
			}
			reset := s.DurationUntilReset.AsDuration()
			assert.True(t, reset > 0 && reset <= longest, "%s: duration_until_reset %s, window %s", u.res, reset, longest)
		}
	}
}
