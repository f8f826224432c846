package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/tlsconf/tlstest"
)

// TestTLSTermination: the proxy and admin listeners serve HTTPS with a
// certificate made in the test, as `curl --cacert cert.pem https://...`
// would see it; a replaced certificate is served without a restart.
func TestTLSTermination(t *testing.T) {
	up := harness.StartUpstream(t)
	dir := t.TempDir()
	first := tlstest.Write(t, dir, "first")
	g := harness.Start(t, harness.ConfigYAML(up.URL, fmt.Sprintf(`
limits: {ip: 0, tenant: 10, window: 1m} # one window for the whole test
server:
  tls: {cert_file: %q, key_file: %q}
  admin_tls: {cert_file: %q, key_file: %q}
`, first.CertFile, first.KeyFile, first.CertFile, first.KeyFile)))
	proxyURL := strings.Replace(g.URL, "http://", "https://", 1)
	adminURL := strings.Replace(g.Admin, "http://", "https://", 1)

	// get trusts only pool (curl --cacert) and returns the answer and the
	// certificate the server showed.
	get := func(pool *x509.CertPool, url string, header ...string) (*http.Response, *x509.Certificate, string) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, ForceAttemptHTTP2: true}}
		req, err := http.NewRequest("GET", url, nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.CloseIdleConnections()
		return resp, resp.TLS.PeerCertificates[0], string(body)
	}

	resp, cert, _ := get(first.Pool, proxyURL+"/hello", "X-API-Key", "hot-key")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "first", cert.Subject.CommonName)
	assert.Equal(t, "HTTP/1.1", resp.Proto, "ALPN offers http/1.1 only")
	assert.GreaterOrEqual(t, resp.TLS.Version, uint16(tls.VersionTLS12))
	assert.Equal(t, `"tenant";q=10;w=60`, resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, "9", resp.Header.Get("X-RateLimit-Remaining"))

	resp, _, _ = get(first.Pool, adminURL+"/healthz")
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	// TLS 1.1 is refused.
	old := &tls.Config{RootCAs: first.Pool, ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS11}
	_, err := tls.Dial("tcp", strings.TrimPrefix(g.URL, "http://"), old)
	assert.Error(t, err, "a TLS 1.1 handshake fails")

	// The certificate is renewed on disk: new handshakes get it.
	second := tlstest.Write(t, dir, "second")
	took := harness.Eventually(t, 5*time.Second, "the renewed certificate is served", func() bool {
		c := &tls.Config{RootCAs: second.Pool, ServerName: "127.0.0.1"}
		conn, err := tls.Dial("tcp", strings.TrimPrefix(g.URL, "http://"), c)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})
	t.Logf("renewed certificate served after %v, without a restart", took.Round(time.Millisecond))
	resp, cert, _ = get(second.Pool, proxyURL+"/hello", "X-API-Key", "hot-key")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "second", cert.Subject.CommonName)
	assert.Equal(t, "8", resp.Header.Get("X-RateLimit-Remaining"), "the same process: its budget went on")
	_, _, text := get(second.Pool, adminURL+"/metrics")
	assert.GreaterOrEqual(t, harness.SumSeries(text, "sentinel_tls_reloads_total", "result", "ok"), 1.0)
}
