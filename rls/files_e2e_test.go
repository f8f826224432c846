package rls

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// noLimit in a want: the descriptor has no rule (no current_limit).
const noLimit = -1

// want is one descriptor's expected answer: its code, its rule's
// requests_per_unit (noLimit: none) and limit_remaining.
type want struct {
	code      rlsv3.RateLimitResponse_Code
	perUnit   int64
	remaining uint32
}

// step is one ShouldRateLimit call and its expected answer.
type step struct {
	name    string
	hits    uint32
	descs   []*commonv3.RateLimitDescriptor
	overall rlsv3.RateLimitResponse_Code
	want    []want
}

func withHits(d *commonv3.RateLimitDescriptor, n uint64) *commonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func descs(ds ...*commonv3.RateLimitDescriptor) []*commonv3.RateLimitDescriptor { return ds }

// meshSteps are calls as Envoy makes them, with the answers
// envoyproxy/ratelimit gives for testdata/mesh.yaml, within one window.
var meshSteps = []step{
	{"generic_key 1", 0, descs(descriptor("generic_key", "slow")), ok, []want{{ok, 3, 2}}},
	{"generic_key 2", 0, descs(descriptor("generic_key", "slow")), ok, []want{{ok, 3, 1}}},
	{"generic_key 3", 0, descs(descriptor("generic_key", "slow")), ok, []want{{ok, 3, 0}}},
	{"generic_key over", 0, descs(descriptor("generic_key", "slow")), over, []want{{over, 3, 0}}},
	{"another value, no rule", 0, descs(descriptor("generic_key", "fast")), ok, []want{{ok, noLimit, 0}}},

	{"first wildcard wins", 0, descs(descriptor("header_match", "api-x")), ok, []want{{ok, 2, 1}}},
	{"first wildcard again", 0, descs(descriptor("header_match", "api-x")), ok, []want{{ok, 2, 0}}},
	{"first wildcard over", 0, descs(descriptor("header_match", "api-x")), over, []want{{over, 2, 0}}},
	{"each value its counter", 0, descs(descriptor("header_match", "api-y")), ok, []want{{ok, 2, 1}}},
	{"second wildcard", 0, descs(descriptor("header_match", "abc")), ok, []want{{ok, 100, 99}}},

	{"nested key only", 0, descs(descriptor("source_cluster", "frontend", "destination_cluster", "orders")), ok, []want{{ok, 4, 3}}},
	{"nested value", 0, descs(descriptor("source_cluster", "frontend", "destination_cluster", "payments")), ok, []want{{ok, 1, 0}}},
	{"nested value over", 0, descs(descriptor("source_cluster", "frontend", "destination_cluster", "payments")), over, []want{{over, 1, 0}}},
	{"shallower: no rule", 0, descs(descriptor("source_cluster", "frontend")), ok, []want{{ok, noLimit, 0}}},
	{"deeper: no rule", 0, descs(descriptor("source_cluster", "frontend", "destination_cluster", "orders", "x", "y")), ok, []want{{ok, noLimit, 0}}},

	{"requests_per_unit 0", 0, descs(descriptor("resource", "zero")), over, []want{{over, 0, 0}}},
	{"unlimited", 0, descs(descriptor("resource", "free")), ok, []want{{ok, noLimit, math.MaxUint32}}},
	{"listed without rate_limit", 0, descs(descriptor("resource", "exempt")), ok, []want{{ok, noLimit, 0}}},
	{"resource alone, unlisted", 0, descs(descriptor("resource", "other")), ok, []want{{ok, noLimit, 0}}},

	{"shadow", 0, descs(descriptor("shadow", "s")), ok, []want{{ok, 1, 0}}},
	{"shadow over stays OK", 0, descs(descriptor("shadow", "s")), ok, []want{{ok, 1, 0}}},

	{"replaced", 0, descs(descriptor("user", "u1"), descriptor("vip", "v1")), ok, []want{{ok, noLimit, 0}, {ok, 10, 9}}},
	{"replaced counter untouched", 0, descs(descriptor("user", "u1")), ok, []want{{ok, 2, 1}}},
	{"a replaced rule still replaces", 0, descs(descriptor("ra", "x"), descriptor("rb", "x"), descriptor("rc", "x")), ok, []want{{ok, 5, 4}, {ok, noLimit, 0}, {ok, noLimit, 0}}},
	{"an unlimited rule replaces", 0, descs(descriptor("ru", "x"), descriptor("rc", "x")), ok, []want{{ok, noLimit, math.MaxUint32}, {ok, noLimit, 0}}},
	{"a shadow rule replaces", 0, descs(descriptor("rs", "x"), descriptor("rc", "x")), ok, []want{{ok, 5, 4}, {ok, noLimit, 0}}},
	{"replaced counters untouched", 0, descs(descriptor("rb", "x"), descriptor("rc", "x")), ok, []want{{ok, 5, 4}, {ok, noLimit, 0}}},
	{"the last one alone", 0, descs(descriptor("rc", "x")), ok, []want{{ok, 5, 4}}},

	{"every descriptor counts", 0, descs(descriptor("generic_key", "slow"), descriptor("hits", "h1")), over, []want{{over, 3, 0}, {ok, 10, 9}}},
	{"counted while another was over", 0, descs(descriptor("hits", "h1")), ok, []want{{ok, 10, 8}}},

	{"request hits_addend", 4, descs(descriptor("hits", "h2")), ok, []want{{ok, 10, 6}}},
	{"descriptor hits_addend 0 looks", 3, descs(withHits(descriptor("hits", "h2"), 0)), ok, []want{{ok, 10, 6}}},
	{"request hits_addend 0 is 1", 0, descs(descriptor("hits", "h2")), ok, []want{{ok, 10, 5}}},
	{"descriptor hits_addend wins", 1, descs(withHits(descriptor("hits", "h2"), 7)), over, []want{{over, 10, 0}}},
	{"refused hits spent the budget", 0, descs(descriptor("hits", "h2")), over, []want{{over, 10, 0}}},
	{"hits_addend over the whole limit", 11, descs(descriptor("hits", "h3")), over, []want{{over, 10, 0}}},
	{"and the budget is spent", 0, descs(descriptor("hits", "h3")), over, []want{{over, 10, 0}}},

	{"quota", 0, descs(descriptor("quota", "q1")), ok, []want{{ok, 1, 0}}},
	{"one quota over: OK", 0, descs(descriptor("quota", "q1"), descriptor("quota", "q2")), ok, []want{{over, 1, 0}, {ok, 1, 0}}},
	{"every quota over: OVER", 0, descs(descriptor("quota", "q1"), descriptor("quota", "q2")), over, []want{{over, 1, 0}, {over, 1, 0}}},

	{"week", 0, descs(descriptor("weekly", "w")), ok, []want{{ok, 2, 1}}},
	{"week again", 0, descs(descriptor("weekly", "w")), ok, []want{{ok, 2, 0}}},
	{"week over", 0, descs(descriptor("weekly", "w")), over, []want{{over, 2, 0}}},
}

// TestFilesAnswerAsEnvoyRatelimit calls ShouldRateLimit over loopback gRPC
// as Envoy does, on the in-memory store and on a real redis-server, and
// checks each descriptor's code, current_limit and limit_remaining.
func TestFilesAnswerAsEnvoyRatelimit(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		runMesh(t, store.NewMemoryStore(store.MemoryOptions{}))
	})
	t.Run("redis", func(t *testing.T) {
		if testing.Short() {
			t.Skip("needs redis-server")
		}
		runMesh(t, redisStore(t, "e2e"))
	})
}

func runMesh(t *testing.T, st store.Store) {
	lim, cat := filesLimiter(t, st, limit.Options{}, func(c *limit.Config) { c.Tenant = 5 })
	c := rlsv3.NewRateLimitServiceClient(start(t, Config{ConfigFiles: []string{"testdata/mesh.yaml"}}, lim, cat))
	for _, s := range meshSteps {
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "mesh", HitsAddend: s.hits, Descriptors: s.descs})
		require.NoError(t, err, s.name)
		assert.Equal(t, s.overall, resp.OverallCode, s.name)
		require.Len(t, resp.Statuses, len(s.want), s.name)
		for i, w := range s.want {
			st := resp.Statuses[i]
			assert.Equal(t, w.code, st.Code, "%s: descriptor %d", s.name, i)
			assert.Equal(t, w.remaining, st.LimitRemaining, "%s: descriptor %d", s.name, i)
			if w.perUnit == noLimit {
				assert.Nil(t, st.CurrentLimit, "%s: descriptor %d", s.name, i)
			} else if assert.NotNil(t, st.CurrentLimit, "%s: descriptor %d", s.name, i) {
				assert.Equal(t, uint32(w.perUnit), st.CurrentLimit.RequestsPerUnit, "%s: descriptor %d", s.name, i)
			}
		}
	}
	// A domain without a file: unknown to envoyproxy/ratelimit, OK; here
	// Sentinel's own entry keys still work in it.
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "other", Descriptors: descs(descriptor("tenant", "acme"))})
	require.NoError(t, err)
	assert.Equal(t, uint32(5), resp.Statuses[0].CurrentLimit.GetRequestsPerUnit())
	assert.Equal(t, uint32(4), resp.Statuses[0].LimitRemaining)
}

// memLimiter is a limiter on the in-memory store, without derived limits.
func memLimiter(t testing.TB) (*limit.Limiter, *catalog.Catalog) {
	var cfg limit.Config
	cfg.SetDefaults()
	cat, err := catalog.NewCatalog(nil, nil, nil)
	require.NoError(t, err)
	lim, err := limit.NewLimiter(cfg, store.NewMemoryStore(store.MemoryOptions{}), limit.Options{Catalog: cat})
	require.NoError(t, err)
	t.Cleanup(lim.Close)
	return lim, cat
}

// TestFilesDescriptorOverride: with grpc.descriptor_override a descriptor's
// own limit replaces its rule (even where no rule matches); without it the
// files decide.
func TestFilesDescriptorOverride(t *testing.T) {
	overridden := func() *commonv3.RateLimitDescriptor {
		d := descriptor("generic_key", "slow")
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 1} // SECOND
		return d
	}
	for _, on := range []bool{true, false} {
		lim, cat := memLimiter(t)
		c := rlsv3.NewRateLimitServiceClient(start(t, Config{ConfigFiles: []string{"testdata/mesh.yaml"}, DescriptorOverride: &on}, lim, cat))
		req := &rlsv3.RateLimitRequest{Domain: "mesh", Descriptors: descs(overridden())}
		resp, err := c.ShouldRateLimit(context.Background(), req)
		require.NoError(t, err)
		st := resp.Statuses[0]
		if on {
			assert.Equal(t, uint32(1), st.CurrentLimit.RequestsPerUnit)
			assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_SECOND, st.CurrentLimit.Unit)
			resp, err = c.ShouldRateLimit(context.Background(), req)
			require.NoError(t, err)
			assert.Equal(t, over, resp.OverallCode)
			continue
		}
		assert.Equal(t, uint32(3), st.CurrentLimit.RequestsPerUnit)
		assert.Equal(t, uint32(2), st.LimitRemaining)
	}
}

// TestFilesMetrics: decisions are counted per configured rule (its name,
// else its place in the file), and a detailed_metric rule's descriptors
// each have a series, at most maxDetailed of them.
func TestFilesMetrics(t *testing.T) {
	lim, cat := memLimiter(t)
	c := rlsv3.NewRateLimitServiceClient(start(t, Config{ConfigFiles: []string{"testdata/mesh.yaml"}}, lim, cat))
	call := func(d *commonv3.RateLimitDescriptor) {
		_, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "mesh", Descriptors: descs(d)})
		require.NoError(t, err)
	}
	for range 4 {
		call(descriptor("generic_key", "slow"))
	}
	call(descriptor("user", "u"))
	for i := range maxDetailed + 5 {
		call(descriptor("hits", "v"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	var b bytes.Buffer
	metrics.WritePrometheus(&b, false)
	out := b.String()
	assert.Contains(t, out, `sentinel_rls_rule_decisions_total{domain="mesh",rule="mesh.generic_key_slow",decision="ok"} 3`)
	assert.Contains(t, out, `sentinel_rls_rule_decisions_total{domain="mesh",rule="mesh.generic_key_slow",decision="over_limit"} 1`)
	assert.Contains(t, out, `sentinel_rls_rule_hits_total{domain="mesh",rule="mesh.generic_key_slow"} 4`)
	assert.Contains(t, out, `sentinel_rls_rule_decisions_total{domain="mesh",rule="per_user",decision="ok"} 1`)
	assert.Contains(t, out, `sentinel_rls_rule_descriptor_decisions_total{domain="mesh",rule="mesh.hits",descriptor="hits_vaa",decision="ok"} 1`)
	assert.Contains(t, out, `descriptor="_other",decision="ok"} 5`)
	assert.Equal(t, maxDetailed+1, strings.Count(out, "sentinel_rls_rule_descriptor_decisions_total{"))
}
