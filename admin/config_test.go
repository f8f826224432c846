package admin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func validConfig() Config {
	var c Config
	c.SetDefaults()
	return c
}

func TestConfigDefaults(t *testing.T) {
	c := validConfig()
	assert.Equal(t, "127.0.0.1:9090", c.Listen)
	assert.Equal(t, 5*time.Second, c.ReadTimeout)
	assert.Equal(t, 30*time.Second, c.WriteTimeout)
	assert.Equal(t, 60*time.Second, c.IdleTimeout)
	require.NoError(t, c.Validate())
}

func TestConfigValidateMessages(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"admin listen", func(c *Config) { c.Listen = "x" }, `server.admin_listen: "x" is not host:port`},
		{"admin exposed", func(c *Config) { c.Listen = "0.0.0.0:9090" },
			`server.admin_token: required when server.admin_listen "0.0.0.0:9090" is not loopback`},
		{"admin exposed all", func(c *Config) { c.Listen = ":9090" }, `server.admin_token: required`},
		{"read timeout", func(c *Config) { c.ReadTimeout = -1 }, `server.admin_read_timeout: -1ns is not a positive duration`},
		{"write timeout", func(c *Config) { c.WriteTimeout = -time.Second }, `server.admin_write_timeout: -1s is not a positive duration`},
		{"idle timeout", func(c *Config) { c.IdleTimeout = -time.Minute }, `server.admin_idle_timeout: -1m0s is not a positive duration`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.modify(&c)
			err := c.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestConfigValidateJoinsEveryBadKey: one error line per bad key.
func TestConfigValidateJoinsEveryBadKey(t *testing.T) {
	c := Config{Listen: "0.0.0.0:9090", ReadTimeout: -1, WriteTimeout: -1, IdleTimeout: -1}
	err := c.Validate()
	require.Error(t, err)
	for _, key := range []string{"server.admin_token", "server.admin_read_timeout", "server.admin_write_timeout", "server.admin_idle_timeout"} {
		assert.Contains(t, err.Error(), key+":")
	}
}

func TestConfigAdminLoopbackNeedsNoToken(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:9090", "[::1]:9090", "localhost:9090"} {
		c := validConfig()
		c.Listen = addr
		assert.NoError(t, c.Validate(), addr)
	}
	c := validConfig()
	c.Listen = "0.0.0.0:9090"
	c.Token = "secret"
	assert.NoError(t, c.Validate())
}
