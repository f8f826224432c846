package rls

import (
	"strings"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// match finds the rule of a descriptor, as envoyproxy/ratelimit does: at
// each depth the entry's exact value, else the first wildcard value in file
// order that matches it, else the entry's key alone. The descriptor must end
// exactly at a node with a rule: a deeper descriptor, an entry the level
// does not have, or a node without rate_limit (an exempt value) is no rule.
// The second result is the value each entry counts under (a shared wildcard
// counts under its pattern), in buf's room when it has enough (a call's
// values need no allocation of their own).
func (d *domainRules) match(desc *commonv3.RateLimitDescriptor, buf []string) (*rule, []string) {
	entries := desc.GetEntries()
	lv := d.root
	values := append(buf[:0], make([]string, len(entries))...)
	for i, e := range entries {
		n := lv.find(e.GetKey(), e.GetValue())
		if n == nil {
			return nil, nil
		}
		values[i] = e.GetValue()
		if n.shared {
			values[i] = n.pattern
		}
		if i == len(entries)-1 {
			return n.rule, values
		}
		if n.children == nil {
			return nil, nil
		}
		lv = n.children
	}
	return nil, nil
}

// find is the node of (key, value) at this level, or nil.
func (lv level) find(key, value string) *node {
	e := lv[key]
	if e == nil {
		return nil
	}
	if n := e.values[value]; n != nil {
		return n
	}
	for _, w := range e.wild {
		if wildcardMatch(w.parts, value) {
			return w.node
		}
	}
	return e.any
}

// wildcardMatch reports whether value matches the pattern split at '*':
// each '*' stands for any run of bytes, possibly empty.
func wildcardMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
