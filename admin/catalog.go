package admin

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
)

// writeTimeout bounds a rule or tenant write (a Redis round trip and a
// publish).
const writeTimeout = 2 * time.Second

// listRules answers GET /v1/rules.
func (s *Server) listRules(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"rules": s.deps.Catalog.Rules()})
}

// rule answers GET, PUT and DELETE /v1/rules/{tenant}/{resource}.
func (s *Server) rule(ctx *fasthttp.RequestCtx) {
	tail := strings.TrimPrefix(string(ctx.Path()), rulePrefix)
	tenant, resource, ok := strings.Cut(tail, "/")
	if !ok || tenant == "" || resource == "" || strings.Contains(resource, "/") {
		writeError(ctx, fasthttp.StatusNotFound, "path", "want /v1/rules/{tenant}/{resource}")
		return
	}
	s.entry(ctx, entryAPI{
		missing: "no rule for tenant " + tenant + " and resource " + resource,
		entry:   "the rule for tenant " + tenant + " and resource " + resource, field: "rules",
		get: func() (any, bool) { return found(s.deps.Catalog.Rule(tenant, resource)) },
		put: func(ctx *fasthttp.RequestCtx) { s.putRule(ctx, tenant, resource) },
		del: func(c context.Context) error { return s.deps.Writer.DeleteRule(c, tenant, resource) },
	})
}

// entryAPI is one catalog entry's API: what GET answers, what PUT and
// DELETE do, and how the answers name the entry.
type entryAPI struct {
	missing string // the 404 message of GET ("no tenant acme")
	entry   string // the entry in a 409 ("tenant acme")
	field   string // the configuration file's key of such entries (tenants)
	get     func() (any, bool)
	put     func(ctx *fasthttp.RequestCtx)
	del     func(ctx context.Context) error
}

// itemName is the path's tail after prefix, one name; without one it
// answers 404 saying that the path wants prefix+want.
func itemName(ctx *fasthttp.RequestCtx, prefix, want string) (string, bool) {
	name := strings.TrimPrefix(string(ctx.Path()), prefix)
	if name == "" || strings.Contains(name, "/") {
		writeError(ctx, fasthttp.StatusNotFound, "path", "want "+prefix+want)
		return "", false
	}
	return name, true
}

// found is a lookup's answer for entryAPI.get.
func found[T any](v T, ok bool) (any, bool) { return v, ok }

// entry answers GET, PUT and DELETE on one catalog entry; DELETE answers 204.
func (s *Server) entry(ctx *fasthttp.RequestCtx, e entryAPI) {
	switch string(ctx.Method()) {
	case fasthttp.MethodGet:
		v, ok := e.get()
		if !ok {
			writeError(ctx, fasthttp.StatusNotFound, "", e.missing)
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, v)
	case fasthttp.MethodPut:
		e.put(ctx)
	case fasthttp.MethodDelete:
		s.change(ctx, fasthttp.StatusNoContent, nil, func(c context.Context) error {
			return fromConfig(e.del(c), e.field, e.entry)
		})
	}
}

// putRule answers PUT /v1/rules/{tenant}/{resource} with the rule stored.
func (s *Server) putRule(ctx *fasthttp.RequestCtx, tenant, resource string) {
	r, fe := parseRule(ctx.PostBody(), tenant, resource)
	if fe != nil {
		writeBodyError(ctx, fe)
		return
	}
	r = s.deps.Writer.RuleDefaults(r) // the answer is the rule as stored
	err := s.store(func(c context.Context) error { return s.deps.Writer.PutRule(c, r) })
	if errors.Is(err, catalog.ErrUnknownTenant) {
		writeError(ctx, fasthttp.StatusNotFound, "tenant", "no tenant "+strconv.Quote(tenant)+
			": create it first with PUT /v1/tenants/"+tenant+"; rules for clients without an API key use the tenant "+
			catalog.AnonymousTenant+" (limited per client IP)")
		return
	}
	s.answerChange(ctx, err, fasthttp.StatusOK, r)
}

// parseRule decodes a PUT rule body for the path's tenant and resource.
// What the rule itself must hold is checked by the writer (Rule.Validate),
// which fills an unset algorithm and window from the limits section.
func parseRule(body []byte, tenant, resource string) (catalog.Rule, *catalog.ValidationError) {
	var r catalog.Rule
	if fe := decodeStrict(body, &r); fe != nil {
		return catalog.Rule{}, fe
	}
	if (r.Tenant != "" && r.Tenant != tenant) || (r.Resource != "" && r.Resource != resource) {
		return catalog.Rule{}, badField("tenant", "the body's tenant and resource must match the path (or be left out)")
	}
	r.Tenant, r.Resource = tenant, resource
	return r, nil
}

// listTenants answers GET /v1/tenants.
func (s *Server) listTenants(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"tenants": s.deps.Catalog.Tenants()})
}

// named answers GET, PUT and DELETE /v1/tenants/{id} and
// /v1/policies/{name}: the entries named by one path segment.
func (s *Server) named(ctx *fasthttp.RequestCtx, r route) {
	prefix, want := tenantPrefix, "{id}"
	if r == routePolicy {
		prefix, want = policyPrefix, "{name}"
	}
	name, ok := itemName(ctx, prefix, want)
	if !ok {
		return
	}
	switch r {
	case routeTenant:
		s.entry(ctx, entryAPI{missing: "no tenant " + name, entry: "tenant " + name, field: "tenants",
			get: func() (any, bool) { return found(s.deps.Catalog.Tenant(name)) },
			put: func(ctx *fasthttp.RequestCtx) { s.putTenant(ctx, name) },
			del: func(c context.Context) error { return s.deps.Writer.DeleteTenant(c, name) }})
	case routePolicy:
		s.entry(ctx, entryAPI{missing: "no policy " + name, entry: "policy " + name, field: "policies",
			get: func() (any, bool) { return found(s.deps.Writer.Policy(name)) },
			put: func(ctx *fasthttp.RequestCtx) { s.putPolicy(ctx, name) },
			del: func(c context.Context) error { return s.deps.Writer.DeletePolicy(c, name) }})
	}
}

// putTenant answers PUT /v1/tenants/{id} with the tenant stored.
func (s *Server) putTenant(ctx *fasthttp.RequestCtx, id string) {
	var t catalog.Tenant
	if !decodeNamed(ctx, &t, "id", &t.ID, id) {
		return
	}
	if t.APIKeys == nil {
		t.APIKeys = []string{}
	}
	s.change(ctx, fasthttp.StatusOK, t, func(c context.Context) error { return s.deps.Writer.PutTenant(c, t) })
}

// decodeNamed decodes a PUT body into v, whose name (the body's field,
// *name) must be the path's or left out, and sets it to the path's; it
// answers 400 (or 415) and returns false otherwise.
func decodeNamed(ctx *fasthttp.RequestCtx, v any, field string, name *string, path string) bool {
	if fe := decodeStrict(ctx.PostBody(), v); fe != nil {
		writeBodyError(ctx, fe)
		return false
	}
	if *name != "" && *name != path {
		writeError(ctx, fasthttp.StatusBadRequest, field, "the body's "+field+" must match the path (or be left out)")
		return false
	}
	*name = path
	return true
}

// configEntryError is catalog.ErrConfigEntry for one entry: field is the
// config.yaml key that holds it, where the operator must look to remove it.
type configEntryError struct {
	field, msg string
	err        error
}

func (e *configEntryError) Error() string { return e.msg }
func (e *configEntryError) Unwrap() error { return e.err }

// fromConfig names the config key and the entry of a catalog.ErrConfigEntry
// (other errors pass through).
func fromConfig(err error, field, entry string) error {
	if !errors.Is(err, catalog.ErrConfigEntry) {
		return err
	}
	return &configEntryError{field: field, err: err,
		msg: entry + " comes from the configuration file: override it with PUT, or remove it from the file and reload"}
}

// change runs one catalog write and answers it: status with body (nil: no
// body) when it worked, the write's error otherwise.
func (s *Server) change(ctx *fasthttp.RequestCtx, status int, body any, write func(context.Context) error) {
	s.answerChange(ctx, s.store(write), status, body)
}

// store runs one catalog write within writeTimeout.
func (s *Server) store(write func(context.Context) error) error {
	c, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return write(c)
}

// answerChange answers a catalog write: status with body (nil: no body)
// when err is nil; otherwise 400 for invalid input (naming the field), 404
// for a missing entry, 409 for a config entry, 503 when the store cannot be
// written.
func (s *Server) answerChange(ctx *fasthttp.RequestCtx, err error, status int, body any) {
	var ve *catalog.ValidationError
	switch {
	case err == nil && body == nil:
		ctx.SetStatusCode(status)
	case err == nil:
		writeJSON(ctx, status, body)
	case errors.As(err, &ve):
		writeError(ctx, fasthttp.StatusBadRequest, ve.Field, ve.Msg)
	case errors.Is(err, catalog.ErrEntryNotFound):
		writeError(ctx, fasthttp.StatusNotFound, "", "no such entry")
	case errors.Is(err, catalog.ErrConfigEntry):
		var ce *configEntryError
		if errors.As(err, &ce) {
			writeError(ctx, fasthttp.StatusConflict, ce.field, ce.msg)
			return
		}
		writeError(ctx, fasthttp.StatusConflict, "", err.Error())
	default:
		writeError(ctx, fasthttp.StatusServiceUnavailable, "", "cannot store the change: "+err.Error())
	}
}
