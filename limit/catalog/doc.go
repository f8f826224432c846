// Package catalog holds what the limits apply to, and keeps it equal on
// every pod.
//
// The catalog proper (catalog.go, config.go, lookup.go, change.go) is the
// plans and their multipliers, the tenants with their API keys, and the
// rules per (tenant, resource). A Catalog is one immutable snapshot behind
// an atomic pointer: the request path looks a rule up (Lookup) and a key's
// tenant up (LookupAPIKey) without locking or allocating, and writers swap
// in a new snapshot (Replace, Apply). The per (tenant, resource) decision
// counters live here too (Counters, labels.go): their series exist only for
// names some catalog knows.
//
// The policies (policy*.go) are the `policies` section and the limits of
// limits.tenant, limits.api_key, limits.ip and the rules, compiled into one
// PolicySet: what each policy matches, the attributes that key its budgets,
// its limits as store parameters, and its decision counters
// (PolicyCounters), whose series live while a compiled set holds the policy.
// LivePolicies is the set in force, swapped on a reload.
//
// The sync (sync*.go) keeps the rules, tenants and policies written through
// the admin API equal on every pod: a Sync writes them to Redis with a change
// log that every pod reads (a write costs each pod the entries it changed), a
// periodic reload repairs a missed message, and a pod that finds Redis
// emptied (a restart without persistence) restores what it holds. Without
// Redis the same writes change the process's catalog alone.
package catalog
