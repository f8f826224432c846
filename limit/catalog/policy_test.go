package catalog

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// mapAttrs is Attrs over maps (names as the test writes them).
type mapAttrs struct{ headers, query map[string]string }

func (m mapAttrs) Header(n []byte) []byte { return []byte(m.headers[string(n)]) }
func (m mapAttrs) Query(n []byte) []byte  { return []byte(m.query[string(n)]) }

var testDefaults = Defaults{Algorithm: store.SlidingWindow, Window: time.Second, Zone: time.UTC}

func bidsPolicy() Policy {
	return Policy{
		Name:  "bids-per-user",
		Match: PolicyMatch{Resources: []string{"bids"}, Methods: []string{"POST"}, Hosts: []string{"api.example.com"}, Headers: map[string]string{"X-Env": "prod"}},
		Key:   []string{"header:X-User-Id"},
		Limits: []PolicyLimit{
			{Limit: 10, Window: confutil.Duration(time.Second)},
			{Limit: 2000, Period: store.Day},
		},
		Unlimited: Unlimited{Values: []string{"monitoring-bot"}, CIDRs: []string{"10.20.0.0/16"}},
	}
}

func TestCompilePolicies(t *testing.T) {
	ps, err := CompilePolicies([]Policy{bidsPolicy()}, testDefaults)
	require.NoError(t, err)
	named, other := ps.For("bids")
	require.Len(t, named, 1)
	assert.Empty(t, other)
	p := named[0]
	assert.Equal(t, []string{"1s", "day"}, p.Labels)
	assert.Equal(t, store.Params{Algorithm: store.SlidingWindow, Limit: 10, Window: time.Second}, p.Params[0])
	assert.Equal(t, store.Params{Algorithm: store.Quota, Limit: 2000, Period: store.Day, Zone: time.UTC}, p.Params[1])
	assert.False(t, p.PlanMultiplier, "a header key does not take the plan's multiplier")

	s := &Subject{IP: []byte("192.0.2.1"), Resource: "bids", Method: []byte("POST"), Host: []byte("API.example.com:443"),
		Attrs: mapAttrs{headers: map[string]string{"X-Env": "prod", "X-User-Id": "u:1"}}}
	assert.True(t, p.Matches(s))
	id, ok := p.AppendIdentity(nil, s)
	require.True(t, ok)
	assert.Equal(t, "u%3A1", string(id), "':' is escaped")

	for name, change := range map[string]func(s *Subject){
		"method":  func(s *Subject) { s.Method = []byte("GET") },
		"host":    func(s *Subject) { s.Host = []byte("other.example.com") },
		"header":  func(s *Subject) { s.Attrs = mapAttrs{headers: map[string]string{"X-Env": "dev"}} },
		"no attr": func(s *Subject) { s.Attrs = nil },
	} {
		c := *s
		change(&c)
		assert.False(t, p.Matches(&c), name)
	}
	bot := *s
	bot.Attrs = mapAttrs{headers: map[string]string{"X-Env": "prod", "X-User-Id": "monitoring-bot"}}
	_, ok = p.AppendIdentity(nil, &bot)
	assert.False(t, ok, "an unlimited value is not counted")
	inner := *s
	inner.IP = []byte("10.20.3.4")
	_, ok = p.AppendIdentity(nil, &inner)
	assert.False(t, ok, "an unlimited CIDR is not counted")
	long := *s
	long.Attrs = mapAttrs{headers: map[string]string{"X-User-Id": strings.Repeat("x", 200)}}
	id, ok = p.AppendIdentity(nil, &long)
	require.True(t, ok)
	assert.True(t, strings.HasPrefix(string(id), "%H") && len(id) <= 18, "a long value is hashed: %s", id)
}

func TestPolicyKeyAttributes(t *testing.T) {
	no := false
	ps, err := CompilePolicies([]Policy{{
		Name:   "all",
		Match:  PolicyMatch{Anonymous: &no},
		Key:    []string{"ip/24", "ip/64", "api_key", "tenant", "plan", "resource", "method", "path", "query:page"},
		Limits: []PolicyLimit{{Limit: 5}},
	}}, testDefaults)
	require.NoError(t, err)
	p := ps.All()[0]
	assert.True(t, p.PlanMultiplier, "a key with the tenant takes the plan's multiplier")
	s := &Subject{IP: []byte("192.0.2.77"), APIKey: []byte("k1"), Tenant: "acme", Plan: "PREMIUM", Resource: "bids",
		Method: []byte("GET"), Path: []byte("/v1/bids"), Attrs: mapAttrs{query: map[string]string{"page": "2"}}}
	require.True(t, p.Matches(s))
	id, ok := p.AppendIdentity(nil, s)
	require.True(t, ok)
	assert.Equal(t, "192.0.2.0/24:192.0.2.77:k1:acme:PREMIUM:bids:GET:/v1/bids:2", string(id))
	s.IP = []byte("2001:db8:1:2:3:4:5:6")
	id, _ = p.AppendIdentity(nil, s)
	assert.True(t, strings.HasPrefix(string(id), "2001%3Adb8%3A1%3A2%3A3%3A4%3A5%3A6:2001%3Adb8%3A1%3A2%3A%3A/64:"), string(id))
	anon := &Subject{IP: []byte("192.0.2.1")}
	assert.False(t, p.Matches(anon), "anonymous: false excludes requests without an API key")
}

func TestPolicyValidationNamesTheKey(t *testing.T) {
	_, err := CompilePolicies([]Policy{
		{Name: "a", Key: []string{"cookie"}, Limits: []PolicyLimit{{Limit: 1}}},
		{Name: "b", Key: []string{"ip"}, Limits: []PolicyLimit{{Limit: 1}, {Limit: 2}}},
		{Name: "c", Key: []string{"ip"}, Limits: []PolicyLimit{{Limit: 1, Period: store.Day, Algorithm: store.TokenBucket}}},
		{Name: "d", Key: []string{"ip"}},
		{Name: "e", Key: []string{"ip"}, Limits: []PolicyLimit{{Limit: 1}}, Unlimited: Unlimited{CIDRs: []string{"10/8"}}},
		{Name: "f", Key: []string{"ip/129"}, Limits: []PolicyLimit{{Limit: 0}}},
	}, testDefaults)
	require.Error(t, err)
	for _, want := range []string{
		`policies[0].key[0]: policy "a": "cookie" is not one of`,
		`policies[1].limits[1]: policy "b": a second limit of 1s (limits[0])`,
		`policies[2].limits[0].algorithm: policy "c": a period makes a calendar quota`,
		`policies[3].limits: policy "d": required`,
		`policies[4].unlimited.cidrs[0]: policy "e": "10/8" is not a CIDR`,
		`policies[5].key[0]: policy "f": "ip/129": the prefix`,
		`policies[5].limits[0].limit: policy "f": missing: a limit of 1..1000000000000 is required`,
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestCheckCompilesNothing: checking a section registers none of its
// metric series, which only the policies that apply may have; Compile
// registers them.
func TestCheckCompilesNothing(t *testing.T) {
	policies := []Policy{{Name: "checked-only", Key: []string{"ip"}, Limits: []PolicyLimit{{Limit: 5}}}}
	def := Defaults{Algorithm: store.SlidingWindow, Window: time.Second}
	series := func() string {
		var b strings.Builder
		metrics.WritePrometheus(&b, false)
		return b.String()
	}
	require.NoError(t, CheckPolicies(policies, def))
	assert.NotContains(t, series(), `policy="checked-only"`)
	_, err := CompilePolicies(policies, def)
	require.NoError(t, err)
	assert.Contains(t, series(), `policy="checked-only"`)
}

// TestLimitsDecodeJSON: limits decode from JSON through their enums'
// parsers (a period makes a quota; no algorithm name does), a bad value
// names its index, and an unknown field is refused.
func TestLimitsDecodeJSON(t *testing.T) {
	var p Policy
	require.NoError(t, json.Unmarshal([]byte(`{"limits":[{"limit":5,"algorithm":"sliding_log"},{"limit":9,"period":"week"}]}`), &p))
	assert.Equal(t, PolicyLimits{{Limit: 5, Algorithm: store.SlidingLog}, {Limit: 9, Period: store.Week}}, p.Limits)
	var typ *json.UnmarshalTypeError
	require.ErrorAs(t, json.Unmarshal([]byte(`{"limits":[{"limit":5},{"limit":9,"algorithm":"quota","period":"day"}]}`), &p), &typ)
	assert.Equal(t, "limits.[1].algorithm", typ.Field)
	assert.Error(t, json.Unmarshal([]byte(`{"limits":[{"limit":5,"colour":1}]}`), &p))
}
