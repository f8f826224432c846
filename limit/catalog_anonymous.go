package limit

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// AnonymousTenant is the tenant of rules for clients without a known API key:
// a rule {tenant: "*anonymous*", resource: R} limits each client IP on the
// routes of resource R. No tenant ID can be "*anonymous*" (IDs are letters,
// digits, '-', '_' and '.'), and in YAML the name must be quoted.
const AnonymousTenant = "*anonymous*"

// ErrUnknownTenant is returned when writing a rule for a tenant that does not
// exist: such a rule could never apply.
var ErrUnknownTenant = errors.New("limit: no such tenant")

// checkRuleTenant returns ErrUnknownTenant unless a rule for tenant can apply:
// the tenant exists, or it is AnonymousTenant.
func (c *Catalog) checkRuleTenant(tenant string) error {
	if tenant == AnonymousTenant {
		return nil
	}
	if c.snap.Load().tenant(tenant) == nil {
		return fmt.Errorf("%w: %q", ErrUnknownTenant, tenant)
	}
	return nil
}

// requestRule returns the rule that applies to req, or nil: the rule for
// (tenant, resource), or for an anonymous request with a client IP the rule
// for (AnonymousTenant, resource), which limits each IP (anon is then true).
// It allocates nothing.
func (c *Catalog) requestRule(req *Request) (r *compiledRule, anon bool) {
	if c == nil || req.Resource == "" {
		return nil, false
	}
	if req.Tenant != "" {
		return c.findRule(req.Tenant, req.Resource), false
	}
	if len(req.IP) == 0 {
		return nil, false
	}
	r = c.findRule(AnonymousTenant, req.Resource)
	return r, r != nil
}

// appendRuleKey appends the store key of the rule that applies to req (see
// requestRule): {rule:<tenant>:<resource>}, or
// {rule:*anonymous*:<resource>:<ip>} for an anonymous client.
func appendRuleKey(dst []byte, req *Request, anon bool) []byte {
	if !anon {
		return store.AppendKeyStrings(dst, "", "rule", req.Tenant, req.Resource)
	}
	// The IP is read as a string for this call only: no copy.
	ip := unsafe.String(unsafe.SliceData(req.IP), len(req.IP))
	return store.AppendKeyStrings(dst, "", "rule", AnonymousTenant, req.Resource, ip)
}
