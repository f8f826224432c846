package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/loadtest/demobackend"
)

// startDemoBackend serves the demo backend (with its /ws echo) on a free
// loopback port until the test ends.
func startDemoBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &fasthttp.Server{Handler: demobackend.New(demobackend.Options{}).Handler}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func wsConfig(upstreamURL string) string {
	return fmt.Sprintf(`
upstreams:
  api: {targets: [%q]}
routes:
  - {path_prefix: /ws, upstream: api, resource: chat, websocket: true}
  - {path_prefix: /ws, host: plain.local, upstream: api, resource: plain}
  - {path_prefix: /ws, host: idle.local, upstream: api, resource: idle, websocket: true, websocket_idle_timeout: 200ms}
  - {path_prefix: /other, upstream: api, resource: other, websocket: true}
tenants:
  - {id: hot, plan: FREE, api_keys: [hot-key]}
  - {id: gold, plan: PREMIUM, api_keys: [gold-key]}
limits: {ip: 0, tenant: 2}
adaptive: {enabled: false}
`, upstreamURL)
}

func dialWS(t *testing.T, url string, header ...string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	c, resp, err := d.Dial(url, h)
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, resp, err
}

// TestWebSocketThroughTheGateway: a WebSocket client's echo round trip
// through the gateway to the demo backend's /ws; the handshake is limited
// like any request (a FREE client over its limit gets 429); a route without
// websocket: true forwards the handshake as a plain request, Upgrade
// stripped; an idle connection is closed.
func TestWebSocketThroughTheGateway(t *testing.T) {
	g := harness.Start(t, wsConfig(startDemoBackend(t)))
	ws := strings.Replace(g.URL, "http://", "ws://", 1)
	up0 := harness.Scrape(t, g.Admin, "sentinel_proxy_websocket_upgrades_total", "result", "upgraded")

	c, resp, err := dialWS(t, ws+"/ws", "X-API-Key", "gold-key")
	require.NoError(t, err)
	assert.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	assert.Equal(t, "websocket", strings.ToLower(resp.Header.Get("Upgrade")))
	assert.NotEmpty(t, resp.Header.Get("Sec-WebSocket-Accept"))
	assert.Equal(t, "6", resp.Header.Get("X-RateLimit-Limit"), "PREMIUM: 2 × 3")
	for _, msg := range []string{"hello", strings.Repeat("x", 100<<10)} {
		require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(msg)))
		kind, got, err := c.ReadMessage()
		require.NoError(t, err)
		assert.Equal(t, websocket.TextMessage, kind)
		assert.Equal(t, msg, string(got))
	}
	require.NoError(t, c.WriteMessage(websocket.BinaryMessage, []byte{0, 1, 2, 255}))
	kind, got, err := c.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, websocket.BinaryMessage, kind)
	assert.Equal(t, []byte{0, 1, 2, 255}, got)
	assert.Equal(t, 1.0, harness.Scrape(t, g.Admin, "sentinel_proxy_websocket_open"))
	c.Close()

	// FREE: 2 handshakes a second, then 429 on the handshake.
	for i := range 2 {
		c, _, err := dialWS(t, ws+"/ws", "X-API-Key", "hot-key")
		require.NoError(t, err, "handshake %d", i+1)
		c.Close()
	}
	_, resp, err = dialWS(t, ws+"/ws", "X-API-Key", "hot-key")
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	assert.Equal(t, 3.0, harness.Scrape(t, g.Admin, "sentinel_proxy_websocket_upgrades_total", "result", "upgraded")-up0)

	// Without websocket: true the backend gets a plain GET, Upgrade
	// stripped, and its upgrader refuses it.
	_, resp, err = dialWS(t, ws+"/ws", "X-API-Key", "gold-key", "Host", "plain.local")
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// TestWebSocketIdleTimeout: a spliced connection on which neither side
// sends anything for websocket_idle_timeout is closed; an upstream that
// answers a handshake with anything but 101 has its answer passed on.
func TestWebSocketIdleTimeout(t *testing.T) {
	g := harness.Start(t, wsConfig(startDemoBackend(t)))
	ws := strings.Replace(g.URL, "http://", "ws://", 1)
	idle0 := harness.Scrape(t, g.Admin, "sentinel_proxy_websocket_closed_total", "by", "idle")
	declined0 := harness.Scrape(t, g.Admin, "sentinel_proxy_websocket_upgrades_total", "result", "declined")

	c, _, err := dialWS(t, ws+"/ws", "X-API-Key", "gold-key", "Host", "idle.local")
	require.NoError(t, err)
	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte("one")))
	_, got, err := c.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, "one", string(got))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, _, err = c.ReadMessage()
	require.Error(t, err)
	var ne net.Error
	assert.False(t, errors.As(err, &ne) && ne.Timeout(), "the gateway closed the idle connection: %v", err)
	harness.Eventually(t, 5*time.Second, "the idle close is counted", func() bool {
		return harness.Scrape(t, g.Admin, "sentinel_proxy_websocket_closed_total", "by", "idle")-idle0 == 1
	})

	// /other is not the backend's /ws: its 200 goes back as it is.
	_, resp, err := dialWS(t, ws+"/other", "X-API-Key", "gold-key")
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 1.0, harness.Scrape(t, g.Admin, "sentinel_proxy_websocket_upgrades_total", "result", "declined")-declined0)
}
