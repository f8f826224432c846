package store

import "time"

// Bounds of limits, rules, tenants and check requests. They keep every count
// exact in the scripts' Lua numbers (doubles: integers exact to 2^53) and
// every time a valid Redis TTL, and they bound the work of one script call.
const (
	// MaxLimit bounds a limit, a bucket's capacity, a refill rate (per
	// second) and the tokens of one request: 10^12.
	MaxLimit = 1_000_000_000_000
	// MinRefillRate is the slowest refill rate of a token bucket that
	// refills at all: 10^-6 permits per second (0 means never).
	MinRefillRate = 1e-6
	// MaxRefillTime bounds capacity / refill_rate, the time a token bucket
	// takes to fill: 365 days (its key lives that long).
	MaxRefillTime = 365 * 24 * time.Hour
	// MaxWindow bounds the window of a sliding limit: 24 hours.
	MaxWindow = 24 * time.Hour
	// MaxLogTokens bounds the permits one sliding_log call grants or
	// returns (the log holds one member per permit): 1000. A request for
	// more tokens than that on a sliding_log limit can never pass.
	MaxLogTokens = 1000
)
