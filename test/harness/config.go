package harness

import (
	"fmt"
	"strings"
)

// testYAML is a gateway configuration being built by Config: its
// top-level sections by name, each a flow value ("{...}") or a block of
// lines indented under it, and YAML appended after them.
type testYAML struct {
	sections map[string]string
	extra    string
}

// ConfigOption changes one part of a Config.
type ConfigOption func(*testYAML)

// testSections is the order Config writes the sections in.
var testSections = []string{"server", "upstreams", "routes", "tenants", "adaptive", "redis", "limits", "rules"}

// Config is a gateway's configuration in front of upstreamURL: the
// upstream api (health-checked every second) with one route to it
// (resource default), the tenants hot (FREE, hot-key) and gold (PREMIUM,
// gold-key), adaptive control off; opts replace sections or add some.
func Config(upstreamURL string, opts ...ConfigOption) string {
	c := &testYAML{sections: map[string]string{
		"tenants":  "  - {id: hot, plan: FREE, api_keys: [hot-key]}\n  - {id: gold, plan: PREMIUM, api_keys: [gold-key]}\n",
		"adaptive": "{enabled: false}",
	}}
	WithUpstream("api", fmt.Sprintf("\n    targets: [%q]\n    health_check: {path: /healthz, interval: 1s}", upstreamURL))(c)
	for _, o := range opts {
		o(c)
	}
	var b strings.Builder
	b.WriteString("\n")
	for _, name := range testSections {
		v, ok := c.sections[name]
		switch {
		case !ok:
		case strings.HasSuffix(v, "\n"): // a block
			b.WriteString(name + ":\n" + v)
		default:
			b.WriteString(name + ": " + v + "\n")
		}
	}
	b.WriteString(c.extra)
	return b.String()
}

// WithSection sets the top-level section name to yaml: a flow value, or a
// block of indented lines, each ending with a newline.
func WithSection(name, yaml string) ConfigOption {
	return func(c *testYAML) { c.sections[name] = yaml }
}

// WithUpstream makes the one upstream name, with fields (its YAML after
// "name:"), and routes every path to it (resource default).
func WithUpstream(name, fields string) ConfigOption {
	return func(c *testYAML) {
		c.sections["upstreams"] = "  " + name + ":" + fields + "\n"
		c.sections["routes"] = "  - {path_prefix: /, upstream: " + name + ", resource: default}\n"
	}
}

// WithExtra appends YAML after the sections (sections of its own that the
// others do not write).
func WithExtra(yaml string) ConfigOption {
	return func(c *testYAML) { c.extra = yaml }
}

// ConfigYAML is Config's gateway with extra YAML sections (limits, redis,
// rules, ...) appended.
func ConfigYAML(upstreamURL, extra string) string {
	return Config(upstreamURL, WithExtra(extra))
}
