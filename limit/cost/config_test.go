package cost

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCostValidate(t *testing.T) {
	const p = "policies[0].limits[0]"
	for _, tc := range []struct {
		name string
		c    Cost
		want []string
	}{
		{"fixed", Cost{Estimate: Estimate{Fixed: 100}}, nil},
		{"header", Cost{Estimate: Estimate{Header: "X-Max-Tokens", Default: 100, Max: 400}, Actual: Actual{Header: "X-Usage-Total-Tokens"}}, nil},
		{"json", Cost{Estimate: Estimate{JSON: "max_tokens", Max: 4000}, Actual: Actual{JSON: "usage.total_tokens"}}, nil},
		{"body bytes", Cost{Estimate: Estimate{BodyBytes: true, Default: 1024, Max: 1024}, Actual: Actual{SSE: "usage.total_tokens"}}, nil},
		{"no source", Cost{}, []string{p + ".cost.estimate: set exactly one of fixed, header, json, body_bytes"}},
		{"two sources", Cost{Estimate: Estimate{Fixed: 1, BodyBytes: true}},
			[]string{p + ".cost.estimate: set exactly one of fixed, header, json, body_bytes"}},
		{"fixed negative", Cost{Estimate: Estimate{Fixed: -3}}, []string{p + ".cost.estimate.fixed: -3 must be at least 1"}},
		{"fixed with default", Cost{Estimate: Estimate{Fixed: 3, Default: 2}}, []string{p + ".cost.estimate.default: a fixed estimate takes no default"}},
		{"fixed with max", Cost{Estimate: Estimate{Fixed: 3, Max: 2}}, []string{p + ".cost.estimate.max: a fixed estimate takes no max"}},
		{"max below default", Cost{Estimate: Estimate{Header: "X-Max-Tokens", Default: 100, Max: 50}},
			[]string{p + ".cost.estimate.max: 50 is below default 100"}},
		{"negative default and max", Cost{Estimate: Estimate{BodyBytes: true, Default: -1, Max: -2}},
			[]string{p + ".cost.estimate.default: -1 must be at least 1", p + ".cost.estimate.max: -2 must be at least 1"}},
		{"bad header", Cost{Estimate: Estimate{Header: "X Max"}}, []string{p + `.cost.estimate.header: "X Max" is not a header name`}},
		{"bad paths", Cost{Estimate: Estimate{JSON: "a..b"}, Actual: Actual{SSE: ".usage"}}, []string{
			p + `.cost.estimate.json: "a..b" is not a dotted path of at most 16 object keys such as usage.total_tokens`,
			p + `.cost.actual.sse: ".usage" is not a dotted path of at most 16 object keys such as usage.total_tokens`,
		}},
		{"deep path", Cost{Estimate: Estimate{Fixed: 1}, Actual: Actual{JSON: "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q"}}, []string{
			p + `.cost.actual.json: "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q" is not a dotted path of at most 16 object keys such as usage.total_tokens`,
		}},
		{"two actuals", Cost{Estimate: Estimate{Fixed: 1}, Actual: Actual{Header: "X:U", JSON: "u", SSE: "u."}}, []string{
			p + ".cost.actual: set at most one of header, json, sse",
			p + `.cost.actual.header: "X:U" is not a header name`,
			p + `.cost.actual.sse: "u." is not a dotted path of at most 16 object keys such as usage.total_tokens`,
		}},
	} {
		got := messages(tc.c.Validate(p))
		if tc.want == nil {
			assert.Empty(t, got, tc.name)
			continue
		}
		assert.Equal(t, tc.want, got, tc.name)
	}
	assert.Equal(t, []string{"cost.estimate: set exactly one of fixed, header, json, body_bytes"}, messages((&Cost{}).Validate("")))
}

// TestPathLimits: a path of maxPathKeys keys is read; the matcher refuses
// what Validate refuses.
func TestPathLimits(t *testing.T) {
	path := "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p"
	assert.NoError(t, checkPath(path))
	doc := `{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":{"j":{"k":{"l":{"m":{"n":{"o":{"p":9}}}}}}}}}}}}}}}}`
	assert.Equal(t, int64(9), read(t, &Actual{JSON: path}, "", []byte(doc)))
	var m matcher
	assert.False(t, m.reset(path+".q"))
	assert.False(t, m.reset(""))
	long := make([]byte, maxPathLen+1)
	for i := range long {
		long[i] = 'k'
	}
	assert.Error(t, checkPath(string(long)))
	assert.NoError(t, checkPath(string(long[:maxPathLen])))
}
