// Package tlsconf terminates TLS for Sentinel's listeners: it loads a
// certificate and key from files, serves them through
// tls.Config.GetCertificate, and reloads them when the files change, so a
// renewed certificate is served without a restart.
//
// There is no watcher goroutine: a handshake checks the files' modification
// time and size at most once per CheckInterval and loads them again when
// either changed. A pair that fails to load (a half-written file during a
// renewal) keeps the previous certificate, is counted in
// sentinel_tls_reloads_total{result="error"} and is retried on the next
// check.
package tlsconf

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Config is the `tls` section of a listener: server.tls, server.admin_tls or
// grpc.tls. Both files or neither.
type Config struct {
	// CertFile is the PEM certificate chain, leaf first. "": no TLS.
	CertFile string `mapstructure:"cert_file"`
	// KeyFile is the PEM private key of the leaf certificate.
	KeyFile string `mapstructure:"key_file"`
}

// Enabled reports whether the listener terminates TLS.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

// Validate checks that both files are set and that they load as a key pair;
// prefix is the YAML path of the section ("server.tls").
func (c Config) Validate(prefix string) error {
	if !c.Enabled() {
		return nil
	}
	switch {
	case c.CertFile == "":
		return fmt.Errorf("%s.cert_file: missing; %s.key_file is set", prefix, prefix)
	case c.KeyFile == "":
		return fmt.Errorf("%s.key_file: missing; %s.cert_file is set", prefix, prefix)
	}
	if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
		return fmt.Errorf("%s.cert_file, %s.key_file: cannot load the key pair: %w", prefix, prefix, err)
	}
	return nil
}

// CheckInterval is how often, at most, a handshake looks at the files.
const CheckInterval = time.Second

var (
	reloadsOK    = metrics.NewCounter(`sentinel_tls_reloads_total{result="ok"}`)
	reloadsError = metrics.NewCounter(`sentinel_tls_reloads_total{result="error"}`)
)

// Certificate serves a key pair from files and reloads it when they change.
// It is safe for concurrent use.
type Certificate struct {
	cfg       Config
	cert      atomic.Pointer[tls.Certificate]
	nextCheck atomic.Int64 // unix nanos
	mu        sync.Mutex   // one reload at a time
	stamp     fileStamp    // of the loaded files; guarded by mu
	now       func() time.Time
}

// fileStamp tells whether a file changed.
type fileStamp struct {
	certMod, keyMod   time.Time
	certSize, keySize int64
}

// Load reads the key pair of cfg; the error names the files.
func Load(cfg Config) (*Certificate, error) {
	c := &Certificate{cfg: cfg, now: time.Now}
	st, err := c.statFiles()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("cannot load TLS key pair %q, %q: %w", cfg.CertFile, cfg.KeyFile, err)
	}
	c.cert.Store(&cert)
	c.stamp = st
	c.nextCheck.Store(c.now().Add(CheckInterval).UnixNano())
	return c, nil
}

// ServerConfig is a TLS server configuration of at least TLS 1.2 that
// serves this certificate; nextProtos are the ALPN protocols offered
// ("http/1.1" for the HTTP listeners, "h2" for gRPC).
func (c *Certificate) ServerConfig(nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     nextProtos,
		GetCertificate: c.GetCertificate,
	}
}

// GetCertificate is the tls.Config hook: the cached certificate, reloaded
// first when CheckInterval has passed and the files changed.
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := c.now().UnixNano()
	if next := c.nextCheck.Load(); now >= next && c.nextCheck.CompareAndSwap(next, now+int64(CheckInterval)) {
		c.reload()
	}
	return c.cert.Load(), nil
}

// reload loads the files again when their stamp changed.
func (c *Certificate) reload() {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.statFiles()
	if err == nil && st == c.stamp {
		return
	}
	var cert tls.Certificate
	if err == nil {
		cert, err = tls.LoadX509KeyPair(c.cfg.CertFile, c.cfg.KeyFile)
	}
	if err != nil {
		reloadsError.Inc()
		slog.Warn("tls: keeping the current certificate: cannot reload it", "cert_file", c.cfg.CertFile, "key_file", c.cfg.KeyFile, "error", err)
		return
	}
	c.cert.Store(&cert)
	c.stamp = st
	reloadsOK.Inc()
}

func (c *Certificate) statFiles() (fileStamp, error) {
	ci, err1 := os.Stat(c.cfg.CertFile)
	ki, err2 := os.Stat(c.cfg.KeyFile)
	if err := errors.Join(err1, err2); err != nil {
		return fileStamp{}, fmt.Errorf("cannot read TLS files: %w", err)
	}
	return fileStamp{certMod: ci.ModTime(), keyMod: ki.ModTime(), certSize: ci.Size(), keySize: ki.Size()}, nil
}
