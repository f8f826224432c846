//go:build !race

package cost

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAllocsEstimate(t *testing.T) {
	hv := []byte("250")
	header := func(string) []byte { return hv }
	body := []byte(`{"model":"m","max_tokens":2.5e2,"messages":[{"role":"user","content":"hi \"x\""}]}`)
	for _, e := range []Estimate{
		{Fixed: 3},
		{Header: "X-Max-Tokens", Max: 100},
		{BodyBytes: true},
		{JSON: "max_tokens"},
	} {
		n := testing.AllocsPerRun(100, func() { Sink += e.Of(header, body, int64(len(body))) })
		assert.Zero(t, n, "%+v", e)
	}
	a := Actual{Header: "X-Usage"}
	n := testing.AllocsPerRun(100, func() {
		v, _ := a.FromHeader(header)
		Sink += v
	})
	assert.Zero(t, n, "Actual.FromHeader")
}

// TestAllocsMeter: a Meter reused after Reset allocates nothing, whatever
// the chunks.
func TestAllocsMeter(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    Actual
		ct   string
		body []byte
	}{
		{"sse", Actual{SSE: "usage.total_tokens"}, "text/event-stream", sseStream(200)},
		{"json", Actual{JSON: "usage.total_tokens"}, "application/json", jsonAnswer()},
		{"fraction", Actual{JSON: "n"}, "", []byte(`{"n":12.5e1}`)},
	} {
		var m Meter
		n := testing.AllocsPerRun(20, func() {
			m.Reset(&tc.a, []byte(tc.ct))
			for b := tc.body; len(b) > 0; b = b[min(len(b), 7):] {
				_, _ = m.Write(b[:min(len(b), 7)])
			}
			v, ok := m.Value()
			if !ok {
				panic("no value")
			}
			Sink += v
		})
		assert.Zero(t, n, tc.name)
	}
}

func TestAllocsStatus(t *testing.T) {
	s := Statuses{"401", "5xx"}
	set, err := (&CountIf{Status: s}).Compile()
	assert.NoError(t, err)
	n := testing.AllocsPerRun(100, func() {
		if s.Match(503) && set.Match(401) {
			Sink++
		}
	})
	assert.Zero(t, n)
}
