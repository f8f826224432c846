// Package limit decides whether a request may pass its rate limits, across
// any number of gateway pods.
//
// The Limiter keeps, per active key (an IP, an API key, a tenant, a rule for a
// tenant and resource), a local bucket of permits leased from a Store; a
// request that finds permits is decided locally without allocating. An empty
// bucket asks the store, in one atomic call, for a lease of up to k permits;
// the store counts the request's own permits from the call and the rest of
// the lease until its expiry plus one window (until the pod's next call
// reports them used), so no window of the algorithm's length ever holds more
// approvals than the limit, whatever the number of pods. k is learned per key
// and falls to 1 near the limit, and is 1 when enforcement must be strict.
//
// Stores: RedisStore runs one Lua script per lease (lua/), with Redis' clock,
// on one node or a cluster (one hash-tagged slot per key); MemoryStore is the
// same algorithms in process, for a single instance and for the local
// fallback. Algorithms: sliding_window (a ring of sub-window counters),
// sliding_log (exact, with retried request IDs not counted twice) and
// token_bucket.
//
// A breaker stops store calls after consecutive failures; meanwhile the
// failure policy decides (each pod's share of the limit, allow, or reject).
// The share counts what the store granted the pod, and what the share let
// through is reported to the store once it answers again.
// The Catalog holds tenants, plans and rules as an immutable snapshot;
// CatalogSync keeps it equal on every pod through Redis.
package limit
