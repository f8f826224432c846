// Package limit decides whether a request may pass its rate limits, across
// any number of gateway pods.
//
// The Limiter keeps, per active key (an IP, an API key, a tenant, a rule for a
// tenant and resource), a local bucket of permits leased from a store.Store;
// a request that finds permits is decided locally without allocating. An
// empty bucket asks the store, in one atomic call, for a lease of up to k
// permits; the store counts the request's unleased permits from the call and the
// rest of the lease until its expiry plus one window (until the pod's next
// call reports them used), so no window of the algorithm's length ever holds
// more approvals than the limit, whatever the number of pods. k is learned
// per key and falls to 1 near the limit, and is 1 when enforcement must be
// strict.
//
// # Moving permits
//
// Four verbs name every way a permit moves, in the code and in its comments:
//
//   - lease: a store call grants a pod up to k permits of one key at once
//     (store.LeaseRequest.Want); the pod keeps them in the key's bucket
//     until the lease expires (buckets.go, lease.go).
//   - use: a request uses permits: from its bucket, from the grant of the
//     lease call it made, or, while the store is unreachable, from the pod's
//     local share of the limit (fallback.go). A use counts in the window
//     from the moment it is made.
//   - return: permits nobody will use go back where they were counted, once:
//     a lease's unused permits to the store (store.LeaseRequest.Return), the
//     grant of a call its caller gave up on, the permits a request used under
//     a limit before a later limit refused it (to their bucket, or to the
//     store), and unused lease permits to the local share (lease_return.go).
//   - report: a pod's next lease call for a key tells the store what happened
//     since its last one: how many of the last lease's permits were used
//     (store.LeaseRequest.Used: counted from now on, not until the lease
//     expires), and how many permits the pod used without a lease, from
//     its local share while the store failed: its unleased permits
//     (store.LeaseRequest.Unleased, UnleasedAgo and UnleasedBefore, dated
//     when they were used), so that the store does not grant the window's
//     whole budget on top of them (lease_report.go).
//
// The same words name these in the stores: the Lua scripts' arguments
// (return, used, unleased, unleased_ago, unleased_before) and MemoryStore's
// fields.
//
// Every limit of a request is a policy's: limits.tenant, limits.api_key,
// limits.ip and the rules compile into policies when the Limiter is built
// (catalog.CompileShorthand), and specs.go builds each request's limits from
// them and the `policies` section by one path.
//
// # Resets
//
// A reset makes one budget whole again on every pod (reset.go): ScopeKey
// and PolicyKey name its store keys, Limiter.Reset has the store drop its
// counts and this pod what it holds, and the ResetBus tells the other pods,
// which Forget the key.
//
// # Layout
//
// Package limit is the limiter and the lease protocol, and owns the
// configuration's limit sections (Sections: plans, tenants, limits, rules,
// policies; Config is the limits section). Beside it, by concept:
// limit/store is the Store contract, RedisStore running the Lua scripts,
// MemoryStore and the algorithms; limit/catalog is the plans, tenants,
// rules and policies and their sync across pods. limit/breaker (the store
// breaker per node) and limit/latency (the decision time histogram) are
// used by the limiter alone.
//
// A breaker per store node stops store calls after consecutive failures;
// meanwhile the failure policy decides (each pod's share of the limit, allow,
// or reject). The share counts what the store granted the pod, and what the
// share let through is reported to the store once it answers again.
package limit
