package store

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedisConfigValidateNamesEveryBadKey(t *testing.T) {
	c := RedisConfig{Addrs: []string{"ok:6379", "nope"}, DB: 16, KeyPrefix: "{x}", TLSInsecureSkipVerify: true}
	c.SetDefaults()
	err := c.Validate()
	require.Error(t, err)
	for _, want := range []string{"redis.addrs[1]", "redis.db: 16", "redis.key_prefix", "redis.tls_insecure_skip_verify"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NotContains(t, err.Error(), "redis.addrs[0]")
}
