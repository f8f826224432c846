package catalog

import (
	"hash/maphash"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
)

// maxLabelSets bounds the (tenant, resource) label pairs as a last resort
// (tenants created through the API are not bounded by the configuration);
// further pairs are counted under tenant="other", resource="other".
const maxLabelSets = 10000

// Label values of the per (tenant, resource) counters. A tenant is labelled by
// its ID and a resource by its name only while some catalog knows them (a
// tenant of config.yaml or the API; a resource of a rule or a route); any
// other name is labelOther, so that names sent to the check API cannot
// create series.
const (
	labelAnonymous = "anonymous" // requests without a known tenant
	labelNone      = "none"      // requests without a resource
	labelOther     = "other"     // names no catalog knows
)

// Counters are the rate_limit_* counters of one (tenant, resource). The
// limiter counts its decisions with them; they live here because a pair
// gets its own series only while some catalog names it, and the catalog is
// what knows when a name comes and goes (a write, a reload, Close).
type Counters struct {
	Requests, Allowed, Blocked, ShadowBlocked *metrics.Counter
	names                                     [4]string // for unregistering
}

type labelKey struct{ tenant, resource string }

// knownNames are the tenants and resources that get their own label values.
type knownNames struct {
	tenants, resources map[string]struct{}
}

var (
	labelMu   sync.RWMutex // guards labelSets; writers also hold knownMu
	labelSets = map[labelKey]*Counters{}
	// labelView holds what labelSets holds, for the request path: a
	// sync.Map read of a pair already there is lock-free, where an RLock
	// is a write to a word that every core's requests share. Entries are
	// stored and deleted under labelMu, with labelSets'.
	labelView sync.Map // labelKey → *Counters

	knownMu     sync.Mutex // serializes updates of known
	knownByCat  = map[*Catalog]knownNames{}
	known       atomic.Pointer[knownNames] // the union of knownByCat
	labelsFreed = metrics.NewCounter(`sentinel_limit_label_sets_freed_total`)
	_           = metrics.NewGauge(`sentinel_limit_label_sets`, func() float64 {
		labelMu.RLock()
		defer labelMu.RUnlock()
		return float64(len(labelSets))
	})
)

// labelsFor maps a request's tenant and resource to their label values
// without allocating.
func labelsFor(tenant, resource string) labelKey {
	k := known.Load()
	switch {
	case tenant == "":
		tenant = labelAnonymous
	case k == nil:
		tenant = labelOther
	default:
		if _, ok := k.tenants[tenant]; !ok {
			tenant = labelOther
		}
	}
	switch {
	case resource == "":
		resource = labelNone
	case k == nil:
		resource = labelOther
	default:
		if _, ok := k.resources[resource]; !ok {
			resource = labelOther
		}
	}
	return labelKey{tenant, resource}
}

// CountersFor returns the counters of a request's (tenant, resource). It
// allocates nothing once the label pair has been used.
func CountersFor(tenant, resource string) *Counters {
	kn := known.Load()
	slot := &recent[(maphash.String(recentSeed, tenant)^maphash.String(recentSeed, resource)*31)%recentSlots]
	e := slot.Load()
	if e != nil && e.known == kn && e.tenant == tenant && e.resource == resource {
		return e.c
	}
	c := countersFor(tenant, resource)
	if e == nil || recentMisses.Add(1)%recentRefill == 0 {
		slot.Store(&recentPair{known: kn, tenant: tenant, resource: resource, c: c})
	}
	return c
}

// recent remembers the counters of recently seen (tenant, resource) pairs,
// one per slot, so that a request of a pair seen before finds its counters
// with two string hashes instead of mapping both names to their label
// values and looking the pair up. An entry holds for the known names it
// was made under: a change of them (which may free counters) makes every
// entry stale.
var (
	recent       [recentSlots]atomic.Pointer[recentPair]
	recentSeed   = maphash.MakeSeed()
	recentMisses atomic.Uint32 // one miss in recentRefill takes its slot over
)

const (
	recentSlots  = 1024
	recentRefill = 16
)

type recentPair struct {
	known            *knownNames
	tenant, resource string
	c                *Counters
}

// countersFor is CountersFor without the recent pairs.
func countersFor(tenant, resource string) *Counters {
	k := labelsFor(tenant, resource)
	// Fast path: the pair has its counters.
	if c, ok := labelView.Load(k); ok {
		return c.(*Counters)
	}
	// Slow path: the first request of this pair.
	knownMu.Lock()
	defer knownMu.Unlock()
	k = labelsFor(tenant, resource) // known may have changed meanwhile
	labelMu.Lock()
	defer labelMu.Unlock()
	if c := labelSets[k]; c != nil {
		return c
	}
	if len(labelSets) >= maxLabelSets {
		k = labelKey{labelOther, labelOther}
		if c := labelSets[k]; c != nil {
			return c
		}
	}
	labels := `{tenant="` + EscapeLabel(k.tenant) + `",resource="` + EscapeLabel(k.resource) + `"}`
	c := &Counters{names: [4]string{
		`rate_limit_requests_total` + labels, `rate_limit_allowed_total` + labels,
		`rate_limit_blocked_total` + labels, `rate_limit_shadow_blocked_total` + labels,
	}}
	c.Requests = metrics.GetOrCreateCounter(c.names[0])
	c.Allowed = metrics.GetOrCreateCounter(c.names[1])
	c.Blocked = metrics.GetOrCreateCounter(c.names[2])
	c.ShadowBlocked = metrics.GetOrCreateCounter(c.names[3])
	labelSets[k] = c
	labelView.Store(k, c)
	return c
}

// setKnownLabels records the tenants and resources that cat names, then
// unregisters the counters of every pair that no catalog names any more (a
// deleted tenant, the last rule of a resource). A request that still holds
// such counters increments a counter no longer exported, which is harmless.
func setKnownLabels(cat *Catalog, names knownNames) {
	knownMu.Lock()
	defer knownMu.Unlock()
	knownByCat[cat] = names
	updateKnownLocked()
}

// forgetLabels drops what cat names (Catalog.Close).
func forgetLabels(cat *Catalog) {
	knownMu.Lock()
	defer knownMu.Unlock()
	delete(knownByCat, cat)
	updateKnownLocked()
}

// updateKnownLocked publishes the union of knownByCat and frees the label
// sets it no longer backs (knownMu held).
func updateKnownLocked() {
	union := knownNames{tenants: map[string]struct{}{}, resources: map[string]struct{}{}}
	for _, n := range knownByCat {
		maps.Copy(union.tenants, n.tenants)
		maps.Copy(union.resources, n.resources)
	}
	known.Store(&union)
	labelMu.Lock()
	defer labelMu.Unlock()
	for k, c := range labelSets {
		if labelKnown(union.tenants, k.tenant, labelAnonymous) && labelKnown(union.resources, k.resource, labelNone) {
			continue
		}
		delete(labelSets, k)
		labelView.Delete(k)
		for _, n := range c.names {
			metrics.UnregisterMetric(n)
		}
		labelsFreed.Inc()
	}
}

// labelKnown reports whether a label value is still backed: a known name, or
// one of the fixed values.
func labelKnown(set map[string]struct{}, v, fixed string) bool {
	if v == fixed || v == labelOther {
		return true
	}
	_, ok := set[v]
	return ok
}

// EscapeLabel keeps label values printable; tenant and resource names are
// validated to [A-Za-z0-9._-], so this only guards the check API's input.
func EscapeLabel(s string) string {
	out := []byte(nil)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' || c < 0x20 || c >= 0x7f {
			if out == nil {
				out = []byte(s[:i])
			}
			out = append(out, '_')
			continue
		}
		if out != nil {
			out = append(out, c)
		}
	}
	if out == nil {
		return s
	}
	return string(out)
}
