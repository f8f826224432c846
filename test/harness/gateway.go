package harness

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/gateway"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Gateway is one Sentinel gateway serving on free loopback ports until the
// test ends.
type Gateway struct {
	gw    *gateway.Gateway
	Path  string // the configuration file, which a test may rewrite and Reload
	URL   string // the proxy, http://127.0.0.1:port
	Admin string // the admin API, http://127.0.0.1:port
	token string // server.admin_token at start
}

// Options change how Start builds a gateway.
type Options struct {
	// Env are SENTINEL_ overrides ("NAME=value").
	Env []string
	// OnDecision sees every limit decision (gateway.Options.OnDecision).
	OnDecision func(req *limit.Request, d limit.Decision, from, to time.Time)
	// Store is the in-memory store the gateway counts in (gateway.Options.Store).
	Store *store.MemoryStore
	// BeforeServe runs between building the gateway (which connects its
	// store) and serving it (which loads the catalog), for a fault between
	// the two.
	BeforeServe func()
	// PodID is the gateway's name in the pods' heartbeats
	// (gateway.Options.PodID; empty: the process's, numbered).
	PodID string
}

// Start loads configYAML (plus environment overrides, "NAME=value"),
// builds the gateway and serves it on free loopback ports until the test
// ends.
func Start(t testing.TB, configYAML string, env ...string) *Gateway {
	t.Helper()
	return StartWith(t, configYAML, Options{Env: env})
}

// StartWith is Start with options.
func StartWith(t testing.TB, configYAML string, o Options) *Gateway {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(configYAML), 0o600))
	load := func() (*gateway.Config, error) { return gateway.LoadConfig(path, o.Env) }
	cfg, err := load()
	require.NoError(t, err, "config:\n%s", configYAML)
	gw, err := gateway.New(cfg, gateway.Options{Load: load, OnDecision: o.OnDecision, Store: o.Store, PodID: o.PodID})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	if o.BeforeServe != nil {
		o.BeforeServe()
	}
	require.NoError(t, gw.Serve(context.Background(), ln, adminLn))
	g := &Gateway{gw: gw, Path: path, URL: "http://" + ln.Addr().String(), Admin: "http://" + adminLn.Addr().String(), token: cfg.Admin.Token}
	t.Cleanup(g.Stop)
	return g
}

// Stop shuts the gateway down (idempotent).
func (g *Gateway) Stop() { _ = g.Shutdown(5 * time.Second) }

// Shutdown closes the listeners and waits up to grace for the requests in
// flight, as SIGTERM's last step does; a second call does nothing.
func (g *Gateway) Shutdown(grace time.Duration) error {
	if g.gw == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := g.gw.Shutdown(ctx)
	g.gw = nil
	return err
}

// Reload re-reads the configuration file, as SIGHUP does: the changed keys
// it applied, those that need a restart, or why it changed nothing.
func (g *Gateway) Reload() (applied, restart []string, err error) { return g.gw.Reload() }

// Drain starts the shutdown's drain (SIGTERM's first step) and returns
// after delay.
func (g *Gateway) Drain(delay time.Duration) { g.gw.Drain(&delay) }

// GRPCAddr is the Envoy rate limit service's address ("" when grpc.listen is
// off).
func (g *Gateway) GRPCAddr() string {
	if a := g.gw.GRPCAddr(); a != nil {
		return a.String()
	}
	return ""
}

// State is one part of the admin API's /v1/state ("limiter",
// "adaptive", ...), decoded.
func (g *Gateway) State(t testing.TB, part string) map[string]any {
	t.Helper()
	a := Do(t, "GET", g.Admin+"/v1/state", "", "Authorization", "Bearer "+g.token)
	require.Equal(t, 200, a.Status, "%s", a.Body)
	st, ok := a.JSON(t)[part].(map[string]any)
	require.True(t, ok, "no %q in %s", part, a.Body)
	return st
}

// StoreHealthy reports whether the gateway's store breakers are all closed
// (/v1/state).
func (g *Gateway) StoreHealthy(t testing.TB) bool {
	return g.State(t, "limiter")["store_breaker"] == "closed"
}

// LivePods is the number of live pods the gateway counts (/v1/state).
func (g *Gateway) LivePods(t testing.TB) int {
	n, _ := g.State(t, "limiter")["live_pods"].(float64)
	return int(n)
}

// Ready reports whether the admin API's /readyz answers 200 (a draining
// gateway answers 503).
func (g *Gateway) Ready() bool { return Status("GET", g.Admin+"/readyz") == 200 }
