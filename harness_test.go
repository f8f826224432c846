package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gateway is one Sentinel process's parts, serving on free loopback ports.
type gateway struct {
	app   *app
	path  string // the configuration file, which a test may rewrite and reload
	url   string // proxy, http://127.0.0.1:port
	admin string // admin API
}

// startGateway loads configYAML (plus environment overrides), builds the
// gateway and serves it on free loopback ports until the test ends.
func startGateway(t *testing.T, configYAML string, env ...string) *gateway {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(configYAML), 0o600))
	cfg, err := loadConfig(path, env)
	require.NoError(t, err, "config:\n%s", configYAML)
	a, err := build(cfg)
	require.NoError(t, err)
	a.load = func() (*Config, error) { return loadConfig(path, env) }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, a.serve(context.Background(), ln, adminLn))
	g := &gateway{app: a, path: path, url: "http://" + ln.Addr().String(), admin: "http://" + adminLn.Addr().String()}
	t.Cleanup(g.stop)
	return g
}

// stop shuts the gateway down (idempotent).
func (g *gateway) stop() {
	if g.app == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = g.app.shutdown(ctx)
	g.app = nil
}

var client = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256},
}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(a.body, &m), "body %q", a.body)
	return m
}

// do sends one request; headers are name, value pairs.
func do(t testing.TB, method, url, body string, headers ...string) answer {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// status sends one request and returns its status, or 0 on a transport error
// (for load loops that must not stop the test from another goroutine).
func status(method, url string, headers ...string) int {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// upstreamServer is a real HTTP backend that records when each request
// arrived and for which tenant.
type upstreamServer struct {
	url  string
	mu   sync.Mutex
	hits []hit
}

type hit struct {
	at  time.Time
	key string
}

func startUpstream(t *testing.T) *upstreamServer {
	t.Helper()
	u := &upstreamServer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			u.mu.Lock()
			u.hits = append(u.hits, hit{at: time.Now(), key: r.Header.Get("X-API-Key")})
			u.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	u.url = "http://" + ln.Addr().String()
	return u
}

// arrivals returns the arrival times of the requests that carried key.
func (u *upstreamServer) arrivals(key string) []time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []time.Time
	for _, h := range u.hits {
		if h.key == key {
			out = append(out, h.at)
		}
	}
	return out
}

func (u *upstreamServer) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.hits)
}

// scrape reads one sample from the admin /metrics: the sum of the series of
// name whose labels include every given label="value".
func scrape(t testing.TB, admin, name string, labels ...string) float64 {
	t.Helper()
	a := do(t, "GET", admin+"/metrics", "")
	require.Equal(t, http.StatusOK, a.status)
	return sumSeries(string(a.body), name, labels...)
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)`)

func sumSeries(text, name string, labels ...string) float64 {
	total := 0.0
	for _, line := range strings.Split(text, "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil || m[1] != name {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(m[2], labels[i]+`="`+labels[i+1]+`"`) {
				match = false
			}
		}
		if match {
			v, err := strconv.ParseFloat(m[3], 64)
			if err == nil {
				total += v
			}
		}
	}
	return total
}

// eventually polls cond every 10ms until it holds or the deadline passes,
// and returns how long it took.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testYAML is a gateway configuration being built by gatewayConfig: its
// top-level sections by name, each a flow value ("{...}") or a block of
// lines indented under it, and YAML appended after them.
type testYAML struct {
	sections map[string]string
	extra    string
}

// configOption changes one part of a gatewayConfig.
type configOption func(*testYAML)

// testSections is the order gatewayConfig writes the sections in.
var testSections = []string{"server", "upstreams", "routes", "tenants", "adaptive", "redis", "limits", "rules"}

// gatewayConfig is a gateway's configuration in front of upstreamURL: the
// upstream api (health-checked every second) with one route to it
// (resource default), the tenants hot (FREE, hot-key) and gold (PREMIUM,
// gold-key), adaptive control off; opts replace sections or add some.
func gatewayConfig(upstreamURL string, opts ...configOption) string {
	c := &testYAML{sections: map[string]string{
		"tenants":  "  - {id: hot, plan: FREE, api_keys: [hot-key]}\n  - {id: gold, plan: PREMIUM, api_keys: [gold-key]}\n",
		"adaptive": "{enabled: false}",
	}}
	withUpstream("api", fmt.Sprintf("\n    targets: [%q]\n    health_check: {path: /healthz, interval: 1s}", upstreamURL))(c)
	for _, o := range opts {
		o(c)
	}
	var b strings.Builder
	b.WriteString("\n")
	for _, name := range testSections {
		v, ok := c.sections[name]
		switch {
		case !ok:
		case strings.HasSuffix(v, "\n"): // a block
			b.WriteString(name + ":\n" + v)
		default:
			b.WriteString(name + ": " + v + "\n")
		}
	}
	b.WriteString(c.extra)
	return b.String()
}

// withSection sets the top-level section name to yaml: a flow value, or a
// block of indented lines, each ending with a newline.
func withSection(name, yaml string) configOption {
	return func(c *testYAML) { c.sections[name] = yaml }
}

// withUpstream makes the one upstream name, with fields (its YAML after
// "name:"), and routes every path to it (resource default).
func withUpstream(name, fields string) configOption {
	return func(c *testYAML) {
		c.sections["upstreams"] = "  " + name + ":" + fields + "\n"
		c.sections["routes"] = "  - {path_prefix: /, upstream: " + name + ", resource: default}\n"
	}
}

// withExtra appends YAML after the sections (sections of its own that the
// others do not write).
func withExtra(yaml string) configOption {
	return func(c *testYAML) { c.extra = yaml }
}
