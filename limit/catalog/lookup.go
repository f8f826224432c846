package catalog

import (
	"errors"
	"fmt"
)

// AnonymousTenant is the tenant of rules for clients without a known API key:
// a rule {tenant: "*anonymous*", resource: R} limits each client IP on the
// routes of resource R. No tenant ID can be "*anonymous*" (IDs are letters,
// digits, '-', '_' and '.'), and in YAML the name must be quoted.
const AnonymousTenant = "*anonymous*"

// ErrUnknownTenant is returned when writing a rule for a tenant that does not
// exist: such a rule could never apply.
var ErrUnknownTenant = errors.New("limit: no such tenant")

// CheckRuleTenant returns ErrUnknownTenant unless a rule for tenant can apply:
// the tenant exists, or it is AnonymousTenant.
func (c *Catalog) CheckRuleTenant(tenant string) error {
	if tenant == AnonymousTenant {
		return nil
	}
	if c.snap.Load().tenant(tenant) == nil {
		return fmt.Errorf("%w: %q", ErrUnknownTenant, tenant)
	}
	return nil
}

// Lookup returns the rule that applies to a request of tenant (empty:
// anonymous) on resource, or nil: the rule for (tenant, resource), or for an
// anonymous request with a client IP (hasIP) the rule for (AnonymousTenant,
// resource), which limits each IP (anon is then true). The request path
// calls it for every decision: it allocates nothing, and a nil Catalog has
// no rules.
func (c *Catalog) Lookup(tenant, resource string, hasIP bool) (r *CompiledRule, anon bool) {
	if c == nil || resource == "" {
		return nil, false
	}
	if tenant != "" {
		return c.findRule(tenant, resource), false
	}
	if !hasIP {
		return nil, false
	}
	r = c.findRule(AnonymousTenant, resource)
	return r, r != nil
}
