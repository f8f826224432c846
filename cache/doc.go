// Package cache holds upstream responses for the cache-only fallback.
//
// A Cache is a VictoriaMetrics/fastcache bounded in bytes (old entries are
// dropped in bulk when it is full) and kept off the Go heap. It holds the
// status, end-to-end headers and body of 200 answers that Cache-Control
// allows sharing, each with its expiry; an expired entry is a miss. Keys are
// the caller's business: the proxy fills the cache from successful answers
// in every mode and serves from it when the upstream must not be touched.
//
// Metrics, in a set per Cache that Close unregisters:
// sentinel_cache_hits_total, sentinel_cache_misses_total,
// sentinel_cache_stores_total and sentinel_cache_bytes.
package cache
