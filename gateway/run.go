package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Run builds and runs the gateway of cfg until SIGINT/SIGTERM or a
// listener failure, reloading on SIGHUP, and returns the process's exit
// code. pprofListen, when not empty, serves net/http/pprof there (a
// loopback address only).
func Run(cfg *Config, opts Options, version, pprofListen string) int {
	if pprofListen != "" {
		ln, err := listenPprof(pprofListen)
		if err != nil {
			slog.Error("cannot start", "error", err) // the logger exists: its format, as every line after it
			return 2
		}
		defer servePprof(ln)()
	}
	g, err := New(cfg, opts)
	if err != nil {
		slog.Error("cannot start", "error", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := g.Start(ctx); err != nil {
		slog.Error("cannot start", "error", err)
		g.close()
		return 1
	}
	slog.Info("sentinel started", "version", version, "proxy", cfg.Proxy.Server.Listen, "admin", cfg.Admin.Listen, "store", g.storeName)
	if g.grpcAddr != nil {
		slog.Info("Envoy rate limit service (gRPC) started", "listen", g.grpcAddr.String())
	}
	g.waitForStop(ctx, hup)
	return shutdown(g, cfg.Proxy.Server.ShutdownGrace)
}

// waitForStop reloads on every SIGHUP until ctx ends (SIGINT, SIGTERM),
// then drains, or until a listener fails.
func (a *Gateway) waitForStop(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-hup:
			slog.Info("SIGHUP: reloading the configuration")
			_, _, _ = a.Reload() // logs what it applied or why not
		case <-ctx.Done():
			a.Drain(a.cfg.Proxy.Server.DrainDelay)
			return
		case err := <-a.errc:
			slog.Error("listener failed", "error", err)
			return
		}
	}
}

// shutdown closes the listeners and waits up to grace for in-flight
// requests.
func shutdown(g *Gateway, grace time.Duration) int {
	slog.Info("shutting down", "grace", grace.String())
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	code := 0
	if err := g.Shutdown(ctx); err != nil {
		slog.Error("shutdown", "error", err)
		code = 1
	}
	slog.Info("stopped", "took", time.Since(start).Round(time.Millisecond).String())
	return code
}

// Probe exits 0 when the admin listener of cfg answers /healthz with 200
// within two seconds (the -healthcheck flag, for container health checks).
func Probe(cfg *Config) int {
	url := "http://" + dialable(cfg.Admin.Listen) + "/healthz"
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
