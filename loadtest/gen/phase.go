package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// plans are the traffic classes, with the API keys of loadtest/overload.yaml.
var plans = []struct{ short, name, key string }{
	{"P", "PREMIUM", "prem-key"},
	{"S", "STANDARD", "std-key"},
	{"F", "FREE", "free-key"},
}

// phase is one step of the scenario.
type phase struct {
	name     string
	duration time.Duration
	rates    [3]float64 // per plan, requests per second (open loop)
	attack   float64    // A=r: hostile chunked uploads per second, over raw sockets
	closed   int        // C=n: closed loop on n keep-alive connections with PREMIUM's key
	hook     string     // URL to POST at the start of the phase (backend tuning)
}

// group is the part of the name before the first dot ("a" of "a.spike"),
// role the part after it: the acceptance checks find phases by them.
func (p phase) group() string { g, _, _ := strings.Cut(p.name, "."); return g }

func (p phase) role() string { _, r, _ := strings.Cut(p.name, "."); return r }

// parsePhases reads "name:10s:P=40,S=40,F=40,A=5,C=64[:hookURL];...".
func parsePhases(s string) ([]phase, error) {
	var out []phase
	for _, part := range strings.Split(s, ";") {
		p, err := parsePhase(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func parsePhase(part string) (phase, error) {
	f := strings.SplitN(part, ":", 4)
	if len(f) < 3 {
		return phase{}, fmt.Errorf("phase %q: want name:duration:P=r,S=r,F=r,A=r,C=n[:hook-url]", part)
	}
	d, err := time.ParseDuration(f[1])
	if err != nil || d <= 0 {
		return phase{}, fmt.Errorf("phase %q: bad duration %q", part, f[1])
	}
	p := phase{name: f[0], duration: d}
	for _, kv := range strings.Split(f[2], ",") {
		k, v, _ := strings.Cut(kv, "=")
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 {
			return phase{}, fmt.Errorf("phase %q: bad rate %q", part, kv)
		}
		switch i := planIndex(k); {
		case i >= 0:
			p.rates[i] = r
		case k == "A":
			p.attack = r
		case k == "C" && r == float64(int(r)):
			p.closed = int(r)
		default:
			return phase{}, fmt.Errorf("phase %q: unknown %q (P, S, F rates; A attack rate; C connections)", part, kv)
		}
	}
	if len(f) == 4 {
		p.hook = f[3]
	}
	return p, nil
}

// setKeys overrides the plans' API keys: "P=key,F=key".
func setKeys(spec string) error {
	if spec == "" {
		return nil
	}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(kv, "=")
		i := planIndex(k)
		if !ok || i < 0 || v == "" {
			return fmt.Errorf("-keys: %q: want P=key, S=key or F=key", kv)
		}
		plans[i].key = v
	}
	return nil
}

func planIndex(k string) int {
	for i, p := range plans {
		if p.short == k || p.name == k {
			return i
		}
	}
	return -1
}
