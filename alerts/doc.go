// Package alerts holds Sentinel's Prometheus alert rules
// (rate_limiter_alerts.yml) and their promtool unit tests
// (tests/rate_limiter_alerts_test.yml). It has no Go code: alerts_test.go runs
// `promtool check rules` and `promtool test rules` so that `go test ./...`
// (and `make test`) checks the rules.
package alerts
