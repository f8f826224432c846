// Package store is the contract between the limiter and the place where the
// limits are counted, and its implementations. A Store grants permits of one
// key atomically (Lease): it counts a lease whole, takes returned permits back
// where it counted them, and counts the permits a caller reports it used
// without a lease, its unleased permits (see LeaseRequest).
//
// RedisStore runs one Lua script per call (lua/), with Redis' clock, on one
// node or a cluster (every key of a call shares one hash-tagged slot; see the
// key schema in keys.go); it maps keys to cluster nodes (NodeMap) so that
// the limiter can keep a breaker per node. MemoryStore runs the same
// algorithms in process, for a single instance and for the limiter's local
// fallback, and bounds its keys by evicting keys that are not exhausted. LateStore stands in
// for a Redis that did not answer at start. The algorithms are
// sliding_window (a ring of sub-window counters), sliding_log (exact, with
// retried request IDs not counted twice), token_bucket and quota (a
// calendar quota: one counter per period, see Period); one conformance
// suite (conformance_test.go) runs against both stores.
package store
