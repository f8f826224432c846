package limit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestConfigValidateNamesEveryBadKey: one line per bad key, not the first
// only.
func TestConfigValidateNamesEveryBadKey(t *testing.T) {
	c := testLimitsConfig(func(c *Config) {
		c.Algorithm = store.Algorithm(9)
		c.OnStoreFailure = FailurePolicy(9)
		c.IP = -1
		c.MaxKeys = -5
		n := int64(16)
		c.RequestIDRetries = &n
		c.RequestIDWindow = -time.Second
	})
	err := c.Validate()
	require.Error(t, err)
	for _, want := range []string{`limits.algorithm: "algorithm(9)" is not one of`, `limits.on_store_failure: "policy(9)" is not one of local, open, closed`,
		"limits.ip: -1 is out of range", "limits.max_keys: -5 must be at least 1",
		"limits.request_id_retries: 16 is out of range 0 (none)..15", "limits.request_id_window: -1s is out of range"} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestFailurePolicyNames(t *testing.T) {
	for _, p := range []FailurePolicy{FailLocal, FailOpen, FailClosed} {
		got, err := ParseFailurePolicy(p.String())
		require.NoError(t, err)
		assert.Equal(t, p, got)
	}
	_, err := ParseFailurePolicy("Open")
	assert.Error(t, err)
}

// TestEnumsDecodeFromNames: the configuration's enums decode from their
// names with their parser's words, and empty text is the default.
func TestEnumsDecodeFromNames(t *testing.T) {
	var p FailurePolicy
	require.NoError(t, p.UnmarshalText([]byte("closed")))
	assert.Equal(t, FailClosed, p)
	require.NoError(t, p.UnmarshalText(nil))
	assert.Equal(t, FailLocal, p)
	assert.EqualError(t, p.UnmarshalText([]byte("maybe")), `"maybe" is not one of local, open, closed`)
	text, err := FailOpen.MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "open", string(text))

	var a store.Algorithm
	require.NoError(t, a.UnmarshalText([]byte("token_bucket")))
	assert.Equal(t, store.TokenBucket, a)
	assert.EqualError(t, a.UnmarshalText([]byte("leaky_bucket")), `"leaky_bucket" is not one of sliding_window, sliding_log, token_bucket`)
}
