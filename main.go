// Command sentinel is an edge gateway: a reverse proxy that enforces rate limits
// held across pods and sheds load by priority when the backend is overloaded.
//
// main only loads the configuration, wires the parts, serves, and shuts down
// gracefully on SIGINT/SIGTERM; each part lives in its own package.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Environ()))
}

func run(args []string, environ []string) int {
	metrics.ExposeMetadata(true) // # HELP and # TYPE lines on /metrics, as Prometheus tools expect
	fs := flag.NewFlagSet("sentinel", flag.ContinueOnError)
	configPath := fs.String("config", envOr(environ, "SENTINEL_CONFIG", "config.yaml"), "path of the YAML configuration file (env SENTINEL_CONFIG)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	healthcheck := fs.Bool("healthcheck", false, "probe the admin listener's /healthz and exit 0 when healthy (for container health checks)")
	pprofListen := fs.String("pprof", "", "serve net/http/pprof on this loopback host:port, without a token (empty: off)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("sentinel", version)
		return 0
	}
	cfg, err := loadConfig(*configPath, environ)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sentinel: invalid configuration:\n%v\n", err)
		return 2
	}
	if *healthcheck {
		return probe("http://" + dialable(cfg.Admin.Listen) + "/healthz")
	}
	if *pprofListen != "" {
		ln, err := listenPprof(*pprofListen)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sentinel: %v\n", err)
			return 2
		}
		defer servePprof(ln)()
	}
	app, err := build(cfg)
	if err != nil {
		log.Printf("sentinel: cannot start: %v", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.start(ctx); err != nil {
		log.Printf("sentinel: cannot start: %v", err)
		app.close()
		return 1
	}
	log.Printf("sentinel %s: proxy on %s, admin on %s, store %s", version, cfg.Proxy.Server.Listen, cfg.Admin.Listen, app.storeName)
	if app.grpcAddr != nil {
		log.Printf("sentinel: Envoy rate limit service (gRPC) on %s", app.grpcAddr)
	}
	select {
	case <-ctx.Done():
		log.Printf("sentinel: shutting down (grace %s)", cfg.Proxy.Server.ShutdownGrace)
	case err := <-app.errc:
		log.Printf("sentinel: listener failed: %v", err)
		stop()
	}
	start := time.Now()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.Proxy.Server.ShutdownGrace)
	defer cancel()
	code := 0
	if err := app.shutdown(shutdownCtx); err != nil {
		log.Printf("sentinel: shutdown: %v", err)
		code = 1
	}
	log.Printf("sentinel: stopped in %s", time.Since(start).Round(time.Millisecond))
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
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "unhealthy: status", resp.StatusCode)
		return 1
	}
	return 0
}
