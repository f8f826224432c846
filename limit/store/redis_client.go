package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
)

// RedisConfig is the `redis` section of the configuration: how to reach the
// Redis that holds the shared limits. With no addrs, Sentinel runs on the
// in-memory store (one instance).
type RedisConfig struct {
	// Addrs are host:port addresses of one Redis, or of some nodes of a
	// cluster. Empty: no Redis.
	Addrs []string `mapstructure:"addrs"`
	// Username and Password authenticate (Redis 6 ACL; Password alone for
	// requirepass). Default: none.
	Username string `mapstructure:"username"`
	Password string `mapstructure:"password"`
	// DB is the database index, 0..15; a cluster has only 0. Default 0.
	DB int `mapstructure:"db"`
	// TLS connects with TLS. Default false.
	TLS bool `mapstructure:"tls"`
	// TLSInsecureSkipVerify skips server certificate checks (tests only).
	TLSInsecureSkipVerify bool `mapstructure:"tls_insecure_skip_verify"`
	// Cluster requires a Redis Cluster. When false, the client detects it
	// from the first node (rueidis asks CLUSTER SLOTS). Default false.
	Cluster bool `mapstructure:"cluster"`
	// DialTimeout bounds connecting to a node. Default 1s.
	DialTimeout time.Duration `mapstructure:"dial_timeout"`
	// KeyPrefix goes before every key Sentinel writes, with a ':'.
	// Default "sentinel".
	KeyPrefix string `mapstructure:"key_prefix"`
	// ConnectWait is how long start-up keeps retrying a Redis that does not
	// answer yet (a pod and its Redis starting together) before the pod
	// starts without it, deciding per limits.on_store_failure and
	// connecting in the background. Default 15s; a negative value starts
	// without waiting.
	ConnectWait time.Duration `mapstructure:"connect_wait"`
}

// SetDefaults fills the zero values.
func (c *RedisConfig) SetDefaults() {
	confutil.SetDefault(&c.DialTimeout, time.Second)
	confutil.SetDefault(&c.KeyPrefix, "sentinel")
	confutil.SetDefault(&c.ConnectWait, 15*time.Second)
}

// Enabled reports whether a Redis is configured.
func (c *RedisConfig) Enabled() bool { return len(c.Addrs) > 0 }

// Validate checks the section; errors name the YAML key. The error joins one
// line per bad key.
func (c *RedisConfig) Validate() error {
	var errs []error
	for i, a := range c.Addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || !validPort(port) {
			errs = append(errs, fmt.Errorf("redis.addrs[%d]: %q is not host:port", i, a))
		}
	}
	if c.DB < 0 || c.DB > 15 {
		errs = append(errs, fmt.Errorf("redis.db: %d is out of range 0..15", c.DB))
	} else if c.Cluster && c.DB != 0 {
		errs = append(errs, fmt.Errorf("redis.db: %d with redis.cluster: true; a Redis Cluster has only db 0", c.DB))
	}
	if c.DialTimeout < 0 {
		errs = append(errs, fmt.Errorf("redis.dial_timeout: %v is negative; use a duration such as 1s", c.DialTimeout))
	}
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		errs = append(errs, fmt.Errorf("redis.key_prefix: %q contains '{' or '}', which would break the keys' cluster hash tags", c.KeyPrefix))
	}
	if c.TLSInsecureSkipVerify && !c.TLS {
		errs = append(errs, errors.New("redis.tls_insecure_skip_verify: true without redis.tls: true"))
	}
	return errors.Join(errs...)
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n < 65536
}

// NewRedisClient connects to the configured Redis: the one client of the
// process, shared by the store, the catalog and adaptive. It fails when no
// node answers within DialTimeout, or when cluster is required and the nodes
// are not a cluster. Client-side caching is off (Sentinel does not read
// cached data). Unlike the other constructors it provisions cfg itself
// (SetDefaults, Validate; a no-op on a loaded section): tests and tools
// across the packages dial with a partial section, and a zero dial
// timeout would fail every call at once.
func NewRedisClient(cfg RedisConfig) (rueidis.Client, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, fmt.Errorf("redis.addrs: empty; configure at least one host:port")
	}
	client, err := rueidis.NewClient(clientOption(&cfg))
	if err != nil {
		return nil, fmt.Errorf("cannot connect to redis %v: %w", cfg.Addrs, err)
	}
	if cfg.Cluster {
		if err := checkCluster(client, cfg.DialTimeout); err != nil {
			client.Close()
			return nil, fmt.Errorf("redis.cluster: true but %v: %w", cfg.Addrs, err)
		}
	}
	return client, nil
}

func clientOption(cfg *RedisConfig) rueidis.ClientOption {
	opt := rueidis.ClientOption{
		InitAddress:  cfg.Addrs,
		Username:     cfg.Username,
		Password:     cfg.Password,
		SelectDB:     cfg.DB,
		DisableCache: true,
		// A dead connection is noticed within a few dial timeouts; each
		// Lease has its own, much shorter, ctx deadline.
		ConnWriteTimeout: 3 * cfg.DialTimeout,
	}
	opt.Dialer.Timeout = cfg.DialTimeout
	if cfg.TLS {
		opt.TLSConfig = &tls.Config{
			MinVersion:         tls.VersionTLS12,
			InsecureSkipVerify: cfg.TLSInsecureSkipVerify, //nolint:gosec // opt-in, documented as tests only
		}
	}
	return opt
}

// checkCluster asks one node for CLUSTER INFO: a standalone Redis answers
// with an error.
func checkCluster(client rueidis.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	info, err := client.Do(ctx, client.B().ClusterInfo().Build()).ToString()
	if err != nil {
		return fmt.Errorf("CLUSTER INFO: %w", err)
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return fmt.Errorf("cluster state is not ok")
	}
	return nil
}
