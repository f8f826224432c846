// Package docs holds the user documentation; the Go side of it serves the
// metrics page (metrics.md) to the code, whose tables are also the help
// texts /metrics sends, so the two cannot drift apart.
package docs

import _ "embed"

// Metrics is docs/metrics.md, the user documentation of the metrics.
//
//go:embed metrics.md
var Metrics string
