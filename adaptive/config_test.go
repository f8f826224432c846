package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConfigValidateNamesEveryBadKey: one error line per bad key, not the
// first only.
func TestConfigValidateNamesEveryBadKey(t *testing.T) {
	var c Config
	c.SetDefaults()
	c.SpikeFactor = 1
	c.MaxInflight = -1
	c.Weights.CPU = -1
	c.RampUp = -time.Second
	c.Concurrency.RTTSlack = -time.Millisecond
	err := c.Validate()
	require.Error(t, err)
	for _, key := range []string{"adaptive.spike_factor: 1", "adaptive.max_inflight: -1", "adaptive.weights.cpu: -1",
		"adaptive.ramp_up: -1s", "adaptive.concurrency.rtt_slack: -1ms"} {
		assert.Contains(t, err.Error(), key)
	}
	c = Config{}
	c.SetDefaults()
	assert.NoError(t, c.Validate())
}
