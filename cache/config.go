package cache

import (
	"fmt"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
)

// Config is the YAML section `cache`.
type Config struct {
	// MaxBytes bounds the cache's memory. Default 64MB; at least 32MB,
	// fastcache's smallest size.
	MaxBytes confutil.ByteSize `mapstructure:"max_bytes"`
}

// minBytes is fastcache's smallest capacity: it rounds anything smaller up
// to this, so a smaller configured bound would be a lie.
const minBytes = 32 << 20

// SetDefaults fills the zero values of c.
func (c *Config) SetDefaults() {
	confutil.SetDefault(&c.MaxBytes, 64<<20)
}

// Validate checks c; its errors name the YAML key.
func (c Config) Validate() error {
	if c.MaxBytes < minBytes {
		return fmt.Errorf("cache.max_bytes: %s is below 32MiB, the smallest size the cache can bound", c.MaxBytes)
	}
	return nil
}
