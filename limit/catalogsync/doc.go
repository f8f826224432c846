// Package catalogsync keeps a catalog.Catalog equal on every pod: the rules
// and tenants written through the admin API go to Redis with a
// change log that every pod reads (a write costs each pod the entries it
// changed), a periodic reload repairs a missed message, and a pod that finds
// Redis emptied (a restart without persistence) restores what it holds.
// Without Redis the same writes change the process's catalog alone.
package catalogsync
