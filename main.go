// Command sentinel is an edge gateway: a reverse proxy that enforces rate limits
// held across pods and sheds load by priority when the backend is overloaded.
//
// main only loads the configuration, wires the parts, serves, reloads on
// SIGHUP and drains then shuts down gracefully on SIGINT/SIGTERM; each part
// lives in its own package.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sentinel-gateway/sentinel/internal/logx"
)

var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Environ()))
}

// usageEnv is the part of -help that explains the environment.
const usageEnv = `
Environment:
  SENTINEL_CONFIG        path of the configuration file (as -config)
  SENTINEL_<KEY>         overrides one config key: its YAML path in upper case
                         with dots as underscores, e.g.
                           SENTINEL_SERVER_LISTEN=:8080        (server.listen)
                           SENTINEL_LIMITS_IP=100              (limits.ip)
                           SENTINEL_REDIS_ADDRS=r1:6379,r2:6379 (lists: commas)
                           SENTINEL_SERVER_ADMIN_TOKEN=...     (server.admin_token)
                         A SENTINEL_ variable that names no key is an error.

Signals:
  SIGHUP                 re-read the file and environment; apply routes, upstreams,
                         limits, tenants, rules, log.level and the adaptive
                         tunables; an invalid file keeps the running one
  SIGTERM, SIGINT        /readyz turns 503, serve for server.drain_delay, then
                         stop accepting and wait up to server.shutdown_grace
`

func run(args []string, environ []string) int {
	metrics.ExposeMetadata(true) // # HELP and # TYPE lines on /metrics, as Prometheus tools expect
	fs := flag.NewFlagSet("sentinel", flag.ContinueOnError)
	configPath := fs.String("config", envOr(environ, "SENTINEL_CONFIG", "config.yaml"), "path of the YAML configuration file (env SENTINEL_CONFIG)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	check := fs.Bool("check", false, "validate the configuration (file and environment), print \"config OK\" and exit 0, or the errors and exit 2")
	healthcheck := fs.Bool("healthcheck", false, "probe the admin listener's /healthz and exit 0 when healthy (for container health checks)")
	pprofListen := fs.String("pprof", "", "serve net/http/pprof on this loopback host:port, without a token (empty: off)")
	fs.Usage = func() {} // -help prints the usage below; a bad flag only points to it
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fmt.Print("Usage: sentinel [flags]\n\nSentinel is an edge gateway: a reverse proxy with rate limits and overload protection.\n\nFlags:\n")
			fs.PrintDefaults()
			fmt.Print(usageEnv)
			return 0
		}
		fmt.Fprintln(os.Stderr, "run sentinel -help for the flags and the SENTINEL_* environment variables")
		return 2
	}
	if *showVersion {
		fmt.Println("sentinel", version)
		return 0
	}
	load := func() (*Config, error) { return loadConfig(*configPath, environ) }
	cfg, err := load()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sentinel: invalid configuration:\n%v\n", err)
		return 2
	}
	if *check {
		fmt.Println("config OK")
		return 0
	}
	if *healthcheck {
		return probe("http://" + dialable(cfg.Admin.Listen) + "/healthz")
	}
	level := new(slog.LevelVar)
	slog.SetDefault(logx.New(cfg.Log, os.Stderr, level))
	logx.RouteStdlog(slog.Default())
	return serve(cfg, load, level, *pprofListen)
}

// serve builds and runs the gateway until SIGINT/SIGTERM or a listener
// failure, reloading on SIGHUP; it returns the exit code.
func serve(cfg *Config, load func() (*Config, error), level *slog.LevelVar, pprofListen string) int {
	if pprofListen != "" {
		ln, err := listenPprof(pprofListen)
		if err != nil {
			slog.Error("cannot start", "error", err) // the logger exists: its format, as every line after it
			return 2
		}
		defer servePprof(ln)()
	}
	app, err := build(cfg)
	if err != nil {
		slog.Error("cannot start", "error", err)
		return 1
	}
	app.load, app.logLevel = load, level
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := app.start(ctx); err != nil {
		slog.Error("cannot start", "error", err)
		app.close()
		return 1
	}
	slog.Info("sentinel started", "version", version, "proxy", cfg.Proxy.Server.Listen, "admin", cfg.Admin.Listen, "store", app.storeName)
	if app.grpcAddr != nil {
		slog.Info("Envoy rate limit service (gRPC) started", "listen", app.grpcAddr.String())
	}
	for wait := true; wait; {
		select {
		case <-hup:
			slog.Info("SIGHUP: reloading the configuration")
			_, _, _ = app.reload() // logs what it applied or why not
		case <-ctx.Done():
			app.drain(cfg.Proxy.Server.DrainDelay)
			wait = false
		case err := <-app.errc:
			slog.Error("listener failed", "error", err)
			wait = false
		}
	}
	return shutdown(app, cfg.Proxy.Server.ShutdownGrace)
}

// shutdown closes the listeners and waits up to grace for in-flight
// requests.
func shutdown(app *app, grace time.Duration) int {
	slog.Info("shutting down", "grace", grace.String())
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	code := 0
	if err := app.shutdown(ctx); err != nil {
		slog.Error("shutdown", "error", err)
		code = 1
	}
	slog.Info("stopped", "took", time.Since(start).Round(time.Millisecond).String())
	return code
}

func envOr(environ []string, key, def string) string {
	for i := len(environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(environ[i], "="); ok && k == key && v != "" {
			return v
		}
	}
	return def
}

// dialable turns a listen address into one a client can dial: an empty or
// unspecified host becomes the loopback address.
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// probe exits 0 when url answers 200 within two seconds.
func probe(url string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "unhealthy:", err)
		return 1
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "unhealthy: status", resp.StatusCode)
		return 1
	}
	return 0
}
