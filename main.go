// Command sentinel is an edge gateway: a reverse proxy that enforces rate limits
// held across pods and sheds load by priority when the backend is overloaded.
//
// main only reads the flags, loads the configuration and starts the
// gateway (package gateway wires, serves, reloads and shuts down).
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/sentinel-gateway/sentinel/gateway"
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
	load := func() (*gateway.Config, error) { return gateway.LoadConfig(*configPath, environ) }
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
		return gateway.Probe(cfg)
	}
	level := new(slog.LevelVar)
	slog.SetDefault(logx.New(cfg.Log, os.Stderr, level))
	logx.RouteStdlog(slog.Default())
	return gateway.Run(cfg, gateway.Options{Load: load, LogLevel: level}, version, *pprofListen)
}

func envOr(environ []string, key, def string) string {
	for i := len(environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(environ[i], "="); ok && k == key && v != "" {
			return v
		}
	}
	return def
}
