// Package catalog holds what the limits apply to: the plans and their
// multipliers, the tenants with their API keys, and the rules per (tenant,
// resource). A Catalog is one immutable snapshot behind an atomic pointer:
// the request path looks a rule up (Lookup) and a key's tenant up
// (LookupAPIKey) without locking or allocating, and writers swap in a new
// snapshot (Replace, Apply). Package catalogsync keeps the catalog equal on
// every pod through Redis.
//
// The per (tenant, resource) decision counters live here too (Counters):
// their series exist only for names some catalog knows.
package catalog
