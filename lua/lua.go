// Package lua holds Sentinel's Redis scripts, embedded so that limit can run
// them with rueidis.NewLuaScript (EVALSHA, falling back to EVAL). Each script
// starts with a comment that lists its KEYS, ARGV and return value; all KEYS
// of one call share a Redis Cluster hash tag.
package lua

import _ "embed" // for go:embed

// SlidingWindow is sliding_window.lua: a ring of sub-window counters per key.
//
//go:embed sliding_window.lua
var SlidingWindow string

// SlidingLog is sliding_log.lua: an exact sorted-set log with request-ID dedupe.
//
//go:embed sliding_log.lua
var SlidingLog string

// TokenBucket is token_bucket.lua: a bucket with a capacity and a refill rate.
//
//go:embed token_bucket.lua
var TokenBucket string

// Quota is quota.lua: a calendar quota, one counter per period.
//
//go:embed quota.lua
var Quota string

// Slots is slots.lua: a concurrency limit, slots held across pods under
// leases that each pod renews.
//
//go:embed slots.lua
var Slots string
