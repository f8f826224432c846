package rls

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
)

// Files are the domains of envoyproxy/ratelimit configuration files
// (grpc.config_files), compiled for lookup; immutable once loaded.
type Files struct {
	domains map[string]*domainRules
	// digest identifies the files' contents, so that a reload that reads
	// the same bytes changes nothing.
	digest [sha256.Size]byte
	rules  int
	// set holds the rules' counters; metrics by domain and label, so that
	// rules that share a name share their series.
	set     *metrics.Set
	metrics map[[2]string]*ruleMetrics
}

// domainRules is one domain's descriptor tree.
type domainRules struct {
	name string
	root level
}

// level is one depth of a descriptor tree: the entries configured for each
// entry key.
type level map[string]*entryNodes

// entryNodes are the nodes of one entry key at one level: by exact value,
// the wildcard values in file order, and the key-only node.
type entryNodes struct {
	values map[string]*node
	wild   []wildNode
	any    *node
}

type wildNode struct {
	parts []string // the value split at '*'
	node  *node
}

// node is one configured (key, value) with its rule (nil: the value is
// exempt) and the next level (nil: none).
type node struct {
	rule     *rule
	children level
	// shared: share_threshold on a wildcard value; every value it matches
	// counts in one budget, keyed by the pattern.
	shared  bool
	pattern string
}

// rule is one rate_limit.
type rule struct {
	domain string
	// path is the rule's place in the file, envoyproxy/ratelimit's stat
	// key ("domain.key_value.key"); the metric label when name is empty.
	path           string
	name           string
	unit           rlsv3.RateLimitResponse_RateLimit_Unit
	perUnit        uint32
	unlimited      bool
	shadow         bool
	quota          bool
	detailedMetric bool
	// override: the rule is a descriptor's own limit, counted in a budget
	// of its own per limit (see counterKey).
	override bool
	replaces []string
	metrics  *ruleMetrics
}

// label is the rule's metric label: its name, else its path.
func (r *rule) label() string {
	if r.name != "" {
		return r.name
	}
	return r.path
}

// yamlRoot, yamlDescriptor and yamlRateLimit are the file's schema, as
// envoyproxy/ratelimit reads it.
type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	Metadata       map[string]any   `yaml:"metadata"`
}

type yamlRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string `yaml:"unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

// knownKeys are the keys envoyproxy/ratelimit accepts, at any depth.
var knownKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true, "metadata": true,
}

// LoadFiles reads and compiles envoyproxy/ratelimit configuration files,
// one domain each. Any invalid file refuses the whole set; the error names
// the file, and the domain and descriptor key when it got that far.
func LoadFiles(paths []string) (*Files, error) {
	f := &Files{domains: make(map[string]*domainRules, len(paths)), set: metrics.NewSet(), metrics: map[[2]string]*ruleMetrics{}}
	h := sha256.New()
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("grpc.config_files: cannot read %q: %w", path, err)
		}
		h.Write([]byte(path))
		h.Write(data)
		if err := f.add(data); err != nil {
			return nil, fmt.Errorf("grpc.config_files: %s: %w", path, err)
		}
	}
	h.Sum(f.digest[:0])
	return f, nil
}

// add compiles one file's domain into f.
func (f *Files) add(data []byte) error {
	var raw yaml.Node
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("cannot parse YAML: %w", err)
	}
	if len(raw.Content) == 0 {
		return errors.New("config file cannot have empty domain")
	}
	if err := checkKeys(raw.Content[0]); err != nil {
		return err
	}
	var root yamlRoot
	if err := raw.Content[0].Decode(&root); err != nil {
		return fmt.Errorf("cannot parse YAML: %w", err)
	}
	if root.Domain == "" {
		return errors.New("config file cannot have empty domain")
	}
	if _, dup := f.domains[root.Domain]; dup {
		return fmt.Errorf("domain %q: duplicate domain (another file of grpc.config_files has it)", root.Domain)
	}
	d := &domainRules{name: root.Domain}
	var err error
	if d.root, err = f.compile(d, root.Domain, root.Descriptors); err != nil {
		return fmt.Errorf("domain %q: %w", root.Domain, err)
	}
	f.domains[root.Domain] = d
	return nil
}

// checkKeys refuses, as envoyproxy/ratelimit does, a key it does not know
// at any depth, a key that is not a string and a list of anything but maps
// (metadata is free-form).
func checkKeys(n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				return fmt.Errorf("line %d: key %q is not a string", k.Line, k.Value)
			}
			if !knownKeys[k.Value] {
				return fmt.Errorf("line %d: unknown key %q", k.Line, k.Value)
			}
			if k.Value == "metadata" {
				continue
			}
			if err := checkKeys(v); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			if e.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: a list holds %q, not a map", e.Line, e.Value)
			}
			if err := checkKeys(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// compile builds one level from its descriptors; parent is the stat key of
// the level ("domain", "domain.key_value").
func (f *Files) compile(d *domainRules, parent string, descs []yamlDescriptor) (level, error) {
	if len(descs) == 0 {
		return nil, nil
	}
	lv := level{}
	for _, yd := range descs {
		if yd.Key == "" {
			return nil, fmt.Errorf("descriptor under %q has an empty key", parent)
		}
		path := parent + "." + yd.Key
		if yd.Value != "" {
			path += "_" + yd.Value
		}
		n, err := f.compileNode(d, path, &yd)
		if err != nil {
			return nil, err
		}
		if err := lv.put(yd.Key, yd.Value, n); err != nil {
			return nil, fmt.Errorf("key %q: %w", path, err)
		}
	}
	return lv, nil
}

// compileNode builds the node of one descriptor at path.
func (f *Files) compileNode(d *domainRules, path string, yd *yamlDescriptor) (*node, error) {
	n := &node{}
	wild := strings.Contains(yd.Value, "*")
	if yd.ShareThreshold {
		if !wild {
			return nil, fmt.Errorf("key %q: share_threshold needs a wildcard value (with '*')", path)
		}
		n.shared, n.pattern = true, yd.Value
	}
	if yd.RateLimit != nil {
		r, err := newRule(d.name, path, yd)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", path, err)
		}
		r.metrics = f.ruleMetrics(d.name, r.label())
		n.rule = r
		f.rules++
	}
	var err error
	n.children, err = f.compile(d, path, yd.Descriptors)
	return n, err
}

// newRule checks and builds the rate_limit of the descriptor at path.
func newRule(domain, path string, yd *yamlDescriptor) (*rule, error) {
	rl := yd.RateLimit
	v, known := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(rl.Unit)]
	validUnit := known && v != int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN)
	switch {
	case rl.Unlimited && validUnit:
		return nil, errors.New("should not specify rate limit unit when unlimited")
	case !rl.Unlimited && !validUnit:
		return nil, fmt.Errorf("invalid rate limit unit %q", rl.Unit)
	}
	r := &rule{
		domain: domain, path: path, name: rl.Name,
		unit: rlsv3.RateLimitResponse_RateLimit_Unit(v), perUnit: rl.RequestsPerUnit,
		unlimited: rl.Unlimited, shadow: yd.ShadowMode, quota: yd.QuotaMode, detailedMetric: yd.DetailedMetric,
	}
	for _, rep := range rl.Replaces {
		switch rep.Name {
		case "":
			return nil, errors.New("should not have an empty replaces entry")
		case rl.Name:
			return nil, fmt.Errorf("replaces should not contain name of same descriptor (%q)", rl.Name)
		}
		r.replaces = append(r.replaces, rep.Name)
	}
	return r, nil
}

// put adds the node of (key, value) to the level; a pair may appear once.
func (lv level) put(key, value string, n *node) error {
	e := lv[key]
	if e == nil {
		e = &entryNodes{values: map[string]*node{}}
		lv[key] = e
	}
	switch {
	case value == "":
		if e.any != nil {
			return errors.New("duplicate descriptor composite key")
		}
		e.any = n
	default:
		if _, dup := e.values[value]; dup {
			return errors.New("duplicate descriptor composite key")
		}
		// Every value is also kept by its exact text: a request whose value
		// is the pattern itself matches it first, as in envoyproxy/ratelimit.
		e.values[value] = n
		if strings.Contains(value, "*") {
			e.wild = append(e.wild, wildNode{parts: strings.Split(value, "*"), node: n})
		}
	}
	return nil
}

// ruleMetrics returns the counters of the rules labelled label in domain.
func (f *Files) ruleMetrics(domain, label string) *ruleMetrics {
	k := [2]string{domain, label}
	m := f.metrics[k]
	if m == nil {
		m = newRuleMetrics(f.set, domain, label)
		f.metrics[k] = m
	}
	return m
}

// Domain reports whether the files configure domain.
func (f *Files) Domain(name string) bool {
	if f == nil {
		return false
	}
	_, ok := f.domains[name]
	return ok
}

// same reports whether g holds the same files as f, byte for byte.
func (f *Files) same(g *Files) bool {
	if f == nil || g == nil {
		return f == g
	}
	return bytes.Equal(f.digest[:], g.digest[:])
}

// setFiles serves files (nil: none) and their metrics, and unregisters the
// metrics of the files they replace.
func (s *service) setFiles(files *Files, override bool) {
	if files != nil {
		metrics.RegisterSet(files.set)
	}
	s.override.Store(override)
	if old := s.files.Swap(files); old != nil && old != files {
		metrics.UnregisterSet(old.set, true)
	}
}
