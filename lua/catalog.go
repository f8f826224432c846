package lua

import _ "embed" // for go:embed

// The catalog scripts keep the rules and tenants written through the admin
// API: one hash per kind, a generation, a log of changed entries and an
// epoch, all under one hash tag so that
// each script touches one Redis Cluster slot.

// CatalogRead is catalog_read.lua: the whole catalog and its generation.
//
//go:embed catalog_read.lua
var CatalogRead string

// CatalogWrite is catalog_write.lua: one entry written or deleted, unless
// Redis holds an older catalog than the writer.
//
//go:embed catalog_write.lua
var CatalogWrite string

// CatalogChanges is catalog_changes.lua: the entries changed since a
// generation, or word to read the whole catalog.
//
//go:embed catalog_changes.lua
var CatalogChanges string

// CatalogRestore is catalog_restore.lua: a pod's whole catalog written back
// over an older one.
//
//go:embed catalog_restore.lua
var CatalogRestore string
