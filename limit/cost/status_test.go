package cost

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStatusesMatch(t *testing.T) {
	s := Statuses{"401", "403", "5xx", "2XX"}
	c := CountIf{Status: s}
	set, err := c.Compile()
	require.NoError(t, err)
	for status, want := range map[int]bool{
		401: true, 403: true, 500: true, 599: true, 200: true, 204: true, 299: true,
		400: false, 402: false, 404: false, 499: false, 300: false, 199: false, 600: false, 0: false, -1: false, 1000: false,
	} {
		assert.Equal(t, want, s.Match(status), "Statuses %d", status)
		assert.Equal(t, want, set.Match(status), "StatusSet %d", status)
	}
	assert.False(t, Statuses{"6xx", "99", "abc"}.Match(600), "bad entries match nothing")
	for _, class := range []string{"1xx", "2xx", "3xx", "4xx", "5xx"} {
		set, err := (&CountIf{Status: Statuses{class}}).Compile()
		require.NoError(t, err)
		lo := int(class[0]-'0') * 100
		assert.True(t, set.Match(lo) && set.Match(lo+99), class)
		assert.False(t, set.Match(lo-1) || set.Match(lo+100), class)
	}
}

func TestCountIfValidate(t *testing.T) {
	c := CountIf{Status: Statuses{"401", "6xx", "600", "99", "4x", "401.5", "", "5XX"}}
	assert.Equal(t, []string{
		`policies[0].limits[1].count_if.status[1]: "6xx" is not a status (100-599) nor a class (1xx-5xx)`,
		`policies[0].limits[1].count_if.status[2]: "600" is not a status (100-599) nor a class (1xx-5xx)`,
		`policies[0].limits[1].count_if.status[3]: "99" is not a status (100-599) nor a class (1xx-5xx)`,
		`policies[0].limits[1].count_if.status[4]: "4x" is not a status (100-599) nor a class (1xx-5xx)`,
		`policies[0].limits[1].count_if.status[5]: "401.5" is not a status (100-599) nor a class (1xx-5xx)`,
		`policies[0].limits[1].count_if.status[6]: "" is not a status (100-599) nor a class (1xx-5xx)`,
	}, messages(c.Validate("policies[0].limits[1]")))
	_, err := c.Compile()
	assert.EqualError(t, err, `count_if.status[1]: "6xx" is not a status (100-599) nor a class (1xx-5xx)`)
	assert.Equal(t, []string{"limits[0].count_if.status: list at least one status (401) or class (5xx)"},
		messages((&CountIf{}).Validate("limits[0]")))
	assert.Empty(t, (&CountIf{Status: Statuses{"100", "599", "1xx"}}).Validate("x"))
}

// TestStatusesMapstructure: YAML's mixed list decodes through the weakly
// typed decoder viper uses, with and without the loader's hooks.
func TestStatusesMapstructure(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want Statuses
	}{
		{[]any{401, "5xx"}, Statuses{"401", "5xx"}},
		{[]any{int64(403), 429.0, "4XX"}, Statuses{"403", "429", "4XX"}},
		{401, Statuses{"401"}},
		// StringToSliceHookFunc splits for []string alone: Validate names it.
		{"401,5xx", Statuses{"401,5xx"}},
	} {
		var c CountIf
		dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
			WeaklyTypedInput: true,
			DecodeHook: mapstructure.ComposeDecodeHookFunc(
				mapstructure.StringToSliceHookFunc(","), mapstructure.TextUnmarshallerHookFunc()),
			Result: &c,
		})
		require.NoError(t, err)
		require.NoError(t, dec.Decode(map[string]any{"status": tc.in}), "%v", tc.in)
		assert.Equal(t, tc.want, c.Status, "%v", tc.in)
	}
}

// limitConfig is the shape of a limit as the policy configuration holds it.
type limitConfig struct {
	Limit   int64    `mapstructure:"limit" json:"limit,omitempty"`
	Cost    *Cost    `mapstructure:"cost" json:"cost,omitempty"`
	CountIf *CountIf `mapstructure:"count_if" json:"count_if,omitempty"`
}

const limitsYAML = `
limits:
  - limit: 1000
    cost:
      estimate: {header: X-Max-Tokens, default: 100, max: 400}
      actual: {sse: usage.total_tokens}
  - {limit: 10, cost: {estimate: {json: max_tokens}, actual: {json: usage.total_tokens}}}
  - {limit: 3, count_if: {status: [401, 403]}}
  - {limit: 3, count_if: {status: [401, "5xx"]}}
`

var limitsWant = []limitConfig{
	{Limit: 1000, Cost: &Cost{Estimate: Estimate{Header: "X-Max-Tokens", Default: 100, Max: 400}, Actual: Actual{SSE: "usage.total_tokens"}}},
	{Limit: 10, Cost: &Cost{Estimate: Estimate{JSON: "max_tokens"}, Actual: Actual{JSON: "usage.total_tokens"}}},
	{Limit: 3, CountIf: &CountIf{Status: Statuses{"401", "403"}}},
	{Limit: 3, CountIf: &CountIf{Status: Statuses{"401", "5xx"}}},
}

// TestConfigYAML: the configuration decodes through viper as the loader
// reads it, with no key left unused.
func TestConfigYAML(t *testing.T) {
	v := viper.New()
	v.SetConfigType("yaml")
	require.NoError(t, v.ReadConfig(strings.NewReader(limitsYAML)))
	var cfg struct {
		Limits []limitConfig `mapstructure:"limits"`
	}
	var md mapstructure.Metadata
	require.NoError(t, v.Unmarshal(&cfg, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		mapstructure.StringToSliceHookFunc(","), mapstructure.TextUnmarshallerHookFunc())),
		func(dc *mapstructure.DecoderConfig) { dc.Metadata = &md }))
	assert.Empty(t, md.Unused)
	assert.Equal(t, limitsWant, cfg.Limits)
	for i := range cfg.Limits {
		if c := cfg.Limits[i].Cost; c != nil {
			assert.Empty(t, c.Validate("limits[0]"))
		}
	}
}

// TestConfigJSON: the admin API's JSON decodes with unknown fields
// refused, and writes back as a person writes it.
func TestConfigJSON(t *testing.T) {
	const in = `[{"limit":1000,"cost":{"estimate":{"header":"X-Max-Tokens","default":100,"max":400},"actual":{"sse":"usage.total_tokens"}}},` +
		`{"limit":10,"cost":{"estimate":{"json":"max_tokens"},"actual":{"json":"usage.total_tokens"}}},` +
		`{"limit":3,"count_if":{"status":[401,403]}},{"limit":3,"count_if":{"status":[401,"5xx"]}}]`
	var got []limitConfig
	dec := json.NewDecoder(strings.NewReader(in))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&got))
	assert.Equal(t, limitsWant, got)
	out, err := json.Marshal(got)
	require.NoError(t, err)
	assert.JSONEq(t, in, string(out))

	for _, bad := range []struct{ in, err string }{
		{`{"count_if":{"status":[401,true]}}`, "json: cannot unmarshal bool into Go struct field CountIf.count_if.status of type cost.Statuses"},
		{`{"count_if":{"status":401}}`, "json: cannot unmarshal number into Go struct field CountIf.count_if.status of type cost.Statuses"},
		{`{"cost":{"estimate":{"fixed":1,"weight":2}}}`, `json: unknown field "weight"`},
	} {
		dec := json.NewDecoder(bytes.NewReader([]byte(bad.in)))
		dec.DisallowUnknownFields()
		var l limitConfig
		assert.EqualError(t, dec.Decode(&l), bad.err, bad.in)
	}
	var s Statuses
	require.NoError(t, json.Unmarshal([]byte(`[600, 401.5, "6xx"]`), &s))
	assert.Equal(t, Statuses{"600", "401.5", "6xx"}, s, "kept for Validate to name")
}

func messages(errs []error) []string {
	out := make([]string, len(errs))
	for i, err := range errs {
		out[i] = err.Error()
	}
	return out
}
