package tlsconf

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/tlsconf/tlstest"
)

func TestValidateNamesTheKey(t *testing.T) {
	dir := t.TempDir()
	assert.NoError(t, Config{}.Validate("server.tls"))
	assert.EqualError(t, Config{CertFile: "a"}.Validate("server.tls"), "server.tls.key_file: missing; server.tls.cert_file is set")
	assert.EqualError(t, Config{KeyFile: "a"}.Validate("grpc.tls"), "grpc.tls.cert_file: missing; grpc.tls.key_file is set")
	err := Config{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: filepath.Join(dir, "nope.key")}.Validate("server.tls")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "server.tls.cert_file, server.tls.key_file: cannot load the key pair")
	p := tlstest.Write(t, dir, "one")
	assert.NoError(t, Config{CertFile: p.CertFile, KeyFile: p.KeyFile}.Validate("server.tls"))
}

// TestReloadOnChange replaces the files and expects the new certificate once
// the check interval has passed, and the old one kept while the new files
// are broken.
func TestReloadOnChange(t *testing.T) {
	dir := t.TempDir()
	first := tlstest.Write(t, dir, "first")
	c, err := Load(Config{CertFile: first.CertFile, KeyFile: first.KeyFile})
	require.NoError(t, err)
	now := time.Now()
	c.now = func() time.Time { return now }
	leaf := func() string {
		cert, err := c.GetCertificate(&tls.ClientHelloInfo{})
		require.NoError(t, err)
		return cert.Leaf.Subject.CommonName
	}
	assert.Equal(t, "first", leaf())

	tlstest.Write(t, dir, "second")
	assert.Equal(t, "first", leaf(), "checked at most once per interval")
	now = now.Add(CheckInterval)
	assert.Equal(t, "second", leaf())

	require.NoError(t, os.WriteFile(first.CertFile, []byte("not a certificate, mid-renewal"), 0o600))
	before := reloadsError.Get()
	now = now.Add(CheckInterval)
	assert.Equal(t, "second", leaf(), "a broken pair keeps the current certificate")
	assert.Equal(t, before+1, reloadsError.Get())

	tlstest.Write(t, dir, "third")
	now = now.Add(CheckInterval)
	assert.Equal(t, "third", leaf(), "retried on the next check")
}

func TestServerConfigMinimumTLS12(t *testing.T) {
	p := tlstest.Write(t, t.TempDir(), "x")
	c, err := Load(Config{CertFile: p.CertFile, KeyFile: p.KeyFile})
	require.NoError(t, err)
	sc := c.ServerConfig("http/1.1")
	assert.Equal(t, uint16(tls.VersionTLS12), sc.MinVersion)
	assert.Equal(t, []string{"http/1.1"}, sc.NextProtos)
}
