package main

import (
	_ "embed"

	"github.com/sentinel-gateway/sentinel/admin"
)

// metricsDoc is the user documentation of the metrics; its tables are also
// the help texts that /metrics sends, so the two cannot drift apart.
//
//go:embed docs/metrics.md
var metricsDoc string

var metricsHelp = admin.MetricsHelp(metricsDoc)
