package cost

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// headers returns a header lookup over h, as fasthttp's Peek: nil when
// absent.
func headers(h map[string]string) func(string) []byte {
	return func(name string) []byte {
		v, ok := h[name]
		if !ok {
			return nil
		}
		return []byte(v)
	}
}

func TestEstimateOf(t *testing.T) {
	hdr := func(v string) func(string) []byte { return headers(map[string]string{"X-Max-Tokens": v}) }
	none := headers(nil)
	byHeader := Estimate{Header: "X-Max-Tokens", Default: 100, Max: 400}
	byJSON := Estimate{JSON: "max_tokens", Default: 100, Max: 400}
	nested := Estimate{JSON: "options.limits.max_tokens"}
	byBytes := Estimate{BodyBytes: true, Default: 10, Max: 1 << 20}
	for _, tc := range []struct {
		name    string
		e       Estimate
		header  func(string) []byte
		body    string
		bodyLen int64
		want    int64
	}{
		{"fixed", Estimate{Fixed: 5}, none, "", 10, 5},
		{"none set", Estimate{}, none, "", 10, 1},
		{"header", byHeader, hdr("250"), "", 0, 250},
		{"header spaces", byHeader, hdr(" 42\t"), "", 0, 42},
		{"header zero", byHeader, hdr("0"), "", 0, 0},
		{"header capped", byHeader, hdr("900"), "", 0, 400},
		{"header at max", byHeader, hdr("400"), "", 0, 400},
		{"header missing", byHeader, none, "", 0, 100},
		{"header empty", byHeader, hdr(""), "", 0, 100},
		{"header text", byHeader, hdr("lots"), "", 0, 100},
		{"header negative", byHeader, hdr("-3"), "", 0, 100},
		{"header fraction", byHeader, hdr("12.5"), "", 0, 100},
		{"header plus", byHeader, hdr("+12"), "", 0, 100},
		{"header overflow", byHeader, hdr("99999999999999999999"), "", 0, 100},
		{"header default 1", Estimate{Header: "X-Max-Tokens"}, none, "", 0, 1},
		{"header uncapped", Estimate{Header: "X-Max-Tokens"}, hdr("123456789"), "", 0, 123456789},
		{"json", byJSON, none, `{"model":"m","max_tokens":300}`, 30, 300},
		{"json capped", byJSON, none, `{"max_tokens":1000}`, 19, 400},
		{"json fraction", byJSON, none, `{"max_tokens":2.5}`, 18, 3},
		{"json missing", byJSON, none, `{"model":"m"}`, 13, 100},
		{"json string", byJSON, none, `{"max_tokens":"300"}`, 20, 100},
		{"json negative", byJSON, none, `{"max_tokens":-1}`, 17, 100},
		{"json invalid", byJSON, none, `{"max_tokens":300`, 17, 100},
		{"json not an object", byJSON, none, `[300]`, 5, 100},
		{"json no body", byJSON, none, "", -1, 100},
		{"json nested", nested, none, `{"options":{"limits":{"max_tokens":7}},"max_tokens":9}`, 0, 7},
		{"json nested missing", nested, none, `{"max_tokens":9}`, 0, 1},
		{"body bytes", byBytes, none, "", 1234, 1234},
		{"body bytes zero", byBytes, none, "", 0, 0},
		{"body bytes unknown", byBytes, none, "", -1, 10},
		{"body bytes capped", byBytes, none, "", 5 << 20, 1 << 20},
	} {
		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		assert.Equal(t, tc.want, tc.e.Of(tc.header, body, tc.bodyLen), tc.name)
	}
}

func TestNeedsBody(t *testing.T) {
	assert.True(t, (&Estimate{JSON: "max_tokens"}).NeedsBody())
	for _, e := range []Estimate{{Fixed: 1}, {Header: "X"}, {BodyBytes: true}} {
		assert.False(t, e.NeedsBody(), "%+v", e)
	}
	assert.True(t, (&Actual{JSON: "u"}).NeedsBody())
	assert.True(t, (&Actual{SSE: "u"}).NeedsBody())
	assert.False(t, (&Actual{Header: "X"}).NeedsBody())
	assert.False(t, (&Actual{}).NeedsBody())
}

func TestActualFromHeader(t *testing.T) {
	a := Actual{Header: "X-Usage-Total-Tokens"}
	for v, want := range map[string]int64{"12": 12, " 0 ": 0, "": -1, "x": -1, "-4": -1, "1.5": -1} {
		n, ok := a.FromHeader(headers(map[string]string{"X-Usage-Total-Tokens": v}))
		if !ok {
			n = -1
		}
		assert.Equal(t, want, n, "%q", v)
	}
	_, ok := a.FromHeader(headers(nil))
	assert.False(t, ok, "missing")
	_, ok = (&Actual{JSON: "u"}).FromHeader(headers(map[string]string{"": "5"}))
	assert.False(t, ok, "no header configured")
}
