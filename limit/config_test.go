package limit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConfigValidateNamesEveryBadKey: one line per bad key, not the first
// only.
func TestConfigValidateNamesEveryBadKey(t *testing.T) {
	c := testLimitsConfig(func(c *Config) {
		c.Algorithm = "leaky_bucket"
		c.OnStoreFailure = "maybe"
		c.IP = -1
		c.MaxKeys = -5
		n := int64(16)
		c.RequestIDRetries = &n
		c.RequestIDWindow = -time.Second
	})
	err := c.Validate()
	require.Error(t, err)
	for _, want := range []string{`limits.algorithm: "leaky_bucket" is not one of`, `limits.on_store_failure: "maybe" is not one of local, open, closed`,
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
