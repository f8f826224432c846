package admin

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// TestRuleRoundTrip: the rules API reads and answers limit.Rule's JSON, with
// the window as text, and names the field of a bad window.
func TestRuleRoundTrip(t *testing.T) {
	c := startAdmin(t, Config{Listen: "127.0.0.1:0"})
	resp := call(t, c, "PUT", "/v1/rules/acme/bids", `{"algorithm":"sliding_window","limit":5,"window":"1m30s"}`)
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	want := `{"tenant":"acme","resource":"bids","algorithm":"sliding_window","limit":5,"window":"1m30s"}`
	assert.JSONEq(t, want, string(resp.Body()))
	resp = call(t, c, "GET", "/v1/rules/acme/bids", "")
	assert.JSONEq(t, want, string(resp.Body()))
	resp = call(t, c, "GET", "/v1/rules", "")
	assert.JSONEq(t, `{"rules":[`+want+`]}`, string(resp.Body()))

	for body, wantMsg := range map[string]string{
		`{"algorithm":"sliding_window","limit":5,"window":"fast"}`: `window: want a duration such as 10s or 1m, got string "fast"`,
		`{"algorithm":"sliding_window","limit":5,"window":60}`:     `window: want a duration such as 10s or 1m, got number 60`,
		`{"algorithm":"sliding_window","limit":5}`:                 `window: required for sliding_window (a duration such as 1s)`,
	} {
		resp = call(t, c, "PUT", "/v1/rules/acme/bids", body)
		require.Equal(t, fasthttp.StatusBadRequest, resp.StatusCode(), body)
		msg, field := problem(t, resp)
		assert.Equal(t, "window", field, body)
		assert.Equal(t, wantMsg, msg, body)
	}
}
