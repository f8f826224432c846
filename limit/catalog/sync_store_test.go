package catalog

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestRuleJSON: the API and the Redis catalog share the rule's JSON, with
// the window as text; rules stored with window_ms by earlier versions are
// still read.
func TestRuleJSON(t *testing.T) {
	r := Rule{Tenant: "acme", Resource: "bids", Algorithm: store.SlidingWindow, Limit: 5, Window: confutil.Duration(10 * time.Second)}
	b, err := json.Marshal(r)
	require.NoError(t, err)
	assert.JSONEq(t, `{"tenant":"acme","resource":"bids","algorithm":"sliding_window","limit":5,"window":"10s"}`, string(b))
	got, err := decodeRule(string(b))
	require.NoError(t, err)
	assert.Equal(t, r, got)

	got, err = decodeRule(`{"tenant":"acme","resource":"bids","algorithm":"sliding_window","limit":5,"window_ms":10000}`)
	require.NoError(t, err)
	assert.Equal(t, r, got)

	tb := Rule{Tenant: "acme", Resource: "bids", Algorithm: store.TokenBucket, Capacity: 3, RefillRate: 1}
	b, _ = json.Marshal(tb)
	assert.NotContains(t, string(b), "window", "a token bucket has no window")
}
