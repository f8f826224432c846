// Command bench-rls measures Sentinel's Envoy rate limit service on one
// redis-server, and envoyproxy/ratelimit beside it when its binary is
// given (-erl), both loaded with the same envoyproxy/ratelimit file
// (bench/rls/bench.yaml, unchanged) and called over Envoy's gRPC API by the
// same load: callers that each send ShouldRateLimit calls back to back for
// a row's duration. Rows:
//
//   - hot: one descriptor, a limit never reached;
//   - 100k, 1m: a descriptor value drawn at random among 100,000 or
//     1,000,000 for each call (per-user limits over a large population:
//     most values are rare), a limit never reached;
//   - flood: one descriptor limited to 100 a second: how many calls the
//     service answers OK (the limit over the row's duration is the
//     right answer).
//
// With -api check the same rows call Sentinel's check API over HTTP
// instead (POST /v1/ratelimit/check, the row's value as the key, limited
// by limits.api_key: a million a minute, 100 a second for the flood row);
// with -api proxy, its proxy (GET / from the row's client address, in an
// X-Forwarded-For the gateway trusts, limited by limits.ip, in front of
// the demo backend's fixed 64-byte answer). Sentinel alone.
//
// For each row and service it prints calls a second, the service's CPU
// and Redis' CPU per call (from /proc and INFO cpu), Redis commands per
// call and the service's resident memory at the end, and for the two
// services side by side the ratios. The rows run in turn for each service
// within a round (-rounds), Redis emptied before each; the figures are the
// medians over rounds. `make bench-rls` runs it (ERL=path for the peer).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.sentinel, "sentinel", "", "Sentinel's binary (required)")
	flag.StringVar(&o.erl, "erl", "", "envoyproxy/ratelimit's binary (optional: built from its source, src/service_cmd)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of one row")
	flag.IntVar(&o.callers, "callers", 64, "concurrent callers")
	flag.IntVar(&o.rounds, "rounds", 1, "rounds of every row and service")
	flag.StringVar(&o.rows, "rows", "hot,100k,1m,flood", "rows to run, in order")
	flag.StringVar(&o.api, "api", "grpc", "the API called: grpc (Envoy's rate limit service), check (Sentinel's check API, its limits.api_key on the row's keys) or proxy (Sentinel's proxy, its limits.ip on the row's client addresses); Sentinel alone but for grpc")
	flag.StringVar(&o.backend, "backend", "", "the demo backend's binary (loadtest/backend), the proxy's upstream (-api proxy)")
	flag.Parse()
	if err := run(&o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-rls:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	sentinel, erl string
	duration      time.Duration
	callers       int
	rounds        int
	rows          string
	api           string
	backend       string
}

// run starts Redis, runs the rows on each service and prints the table.
func run(o *options) error {
	if o.sentinel == "" {
		return fmt.Errorf("-sentinel is required")
	}
	switch {
	case o.api != "grpc" && o.api != "check" && o.api != "proxy":
		return fmt.Errorf("-api: %q is none of grpc, check and proxy", o.api)
	case o.api != "grpc" && o.erl != "":
		return fmt.Errorf("-erl: envoyproxy/ratelimit is an Envoy rate limit service alone (-api %s runs Sentinel alone)", o.api)
	case o.api == "proxy" && o.backend == "":
		return fmt.Errorf("-backend is required with -api proxy")
	}
	rows, err := parseRows(o.rows)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-rls-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(o.rounds*len(rows)*2+2)*(o.duration+time.Minute))
	defer cancel()
	redis, err := startRedis(ctx, dir)
	if err != nil {
		return err
	}
	defer redis.stop()
	services := []string{"sentinel"}
	if o.erl != "" {
		services = append(services, "ratelimit")
	}
	results := map[string][]measure{} // by row name + service name
	for round := 1; round <= o.rounds; round++ {
		for _, r := range rows {
			for _, name := range services {
				m, err := measureFresh(ctx, o, dir, r, name, redis)
				if err != nil {
					return fmt.Errorf("round %d, %s on %s: %w", round, r.name, name, err)
				}
				fmt.Fprintf(os.Stderr, "round %d: %-5s %-9s %s\n", round, r.name, name, m)
				results[r.name+"/"+name] = append(results[r.name+"/"+name], m)
			}
		}
	}
	printTable(os.Stdout, o, rows, services, results)
	return nil
}

// benchFile is the envoyproxy/ratelimit file both services load, next to
// this command's source.
func benchFile() (string, error) {
	for _, p := range []string{"bench/rls/bench.yaml", "bench.yaml"} {
		if _, err := os.Stat(p); err == nil {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("bench/rls/bench.yaml not found: run from the repository's root")
}
