package proxy

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
)

// ruleJSON is a rule on the wire: the window is a Go duration ("10s").
type ruleJSON struct {
	Tenant     string  `json:"tenant"`
	Resource   string  `json:"resource"`
	Algorithm  string  `json:"algorithm"`
	Limit      int64   `json:"limit,omitempty"`
	Window     string  `json:"window,omitempty"`
	Capacity   int64   `json:"capacity,omitempty"`
	RefillRate float64 `json:"refill_rate,omitempty"`
	Shadow     bool    `json:"shadow,omitempty"`
}

func toRuleJSON(r limit.Rule) ruleJSON {
	j := ruleJSON{Tenant: r.Tenant, Resource: r.Resource, Algorithm: r.Algorithm, Limit: r.Limit,
		Capacity: r.Capacity, RefillRate: r.RefillRate, Shadow: r.Shadow}
	if r.Window > 0 {
		j.Window = r.Window.String()
	}
	return j
}

// writeTimeout bounds a rule or tenant write (a Redis round trip and a
// publish).
const writeTimeout = 2 * time.Second

// listRules answers GET /v1/rules.
func (a *Admin) listRules(ctx *fasthttp.RequestCtx) {
	rules := a.deps.Catalog.Rules()
	out := make([]ruleJSON, 0, len(rules))
	for _, r := range rules {
		out = append(out, toRuleJSON(r))
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"rules": out})
}

// rule answers GET, PUT and DELETE /v1/rules/{tenant}/{resource}.
func (a *Admin) rule(ctx *fasthttp.RequestCtx) {
	tail := strings.TrimPrefix(string(ctx.Path()), rulePrefix)
	tenant, resource, ok := strings.Cut(tail, "/")
	if !ok || tenant == "" || resource == "" || strings.Contains(resource, "/") {
		writeError(ctx, fasthttp.StatusNotFound, "path", "want /v1/rules/{tenant}/{resource}")
		return
	}
	switch string(ctx.Method()) {
	case fasthttp.MethodGet:
		r, ok := a.deps.Catalog.Rule(tenant, resource)
		if !ok {
			writeError(ctx, fasthttp.StatusNotFound, "", "no rule for tenant "+tenant+" and resource "+resource)
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, toRuleJSON(r))
	case fasthttp.MethodPut:
		var j ruleJSON
		if fe := decodeStrict(ctx.PostBody(), &j); fe != nil {
			writeError(ctx, fasthttp.StatusBadRequest, fe.Field, fe.Msg)
			return
		}
		if (j.Tenant != "" && j.Tenant != tenant) || (j.Resource != "" && j.Resource != resource) {
			writeError(ctx, fasthttp.StatusBadRequest, "tenant", "the body's tenant and resource must match the path (or be left out)")
			return
		}
		r := limit.Rule{Tenant: tenant, Resource: resource, Algorithm: j.Algorithm, Limit: j.Limit,
			Capacity: j.Capacity, RefillRate: j.RefillRate, Shadow: j.Shadow}
		if j.Window != "" {
			w, err := time.ParseDuration(j.Window)
			if err != nil {
				writeError(ctx, fasthttp.StatusBadRequest, "window", "\""+j.Window+"\" is not a duration such as 10s or 1m")
				return
			}
			r.Window = w
		} else if j.Algorithm != "token_bucket" {
			writeError(ctx, fasthttp.StatusBadRequest, "window", "required for "+j.Algorithm+" (a duration such as 1s)")
			return
		}
		c, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		if err := a.deps.Writer.PutRule(c, r); err != nil {
			if errors.Is(err, limit.ErrUnknownTenant) {
				writeError(ctx, fasthttp.StatusNotFound, "tenant", "no tenant "+strconv.Quote(tenant)+
					": create it first with PUT /v1/tenants/"+tenant+"; rules for clients without an API key use the tenant "+limit.AnonymousTenant+" (limited per client IP)")
				return
			}
			a.writeFailed(ctx, err)
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, toRuleJSON(r))
	case fasthttp.MethodDelete:
		c, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		if err := a.deps.Writer.DeleteRule(c, tenant, resource); err != nil {
			a.writeFailed(ctx, err)
			return
		}
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	}
}

// listTenants answers GET /v1/tenants.
func (a *Admin) listTenants(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"tenants": a.deps.Catalog.Tenants()})
}

// tenant answers GET, PUT and DELETE /v1/tenants/{id}.
func (a *Admin) tenant(ctx *fasthttp.RequestCtx) {
	id := strings.TrimPrefix(string(ctx.Path()), tenantPrefix)
	if id == "" || strings.Contains(id, "/") {
		writeError(ctx, fasthttp.StatusNotFound, "path", "want /v1/tenants/{id}")
		return
	}
	switch string(ctx.Method()) {
	case fasthttp.MethodGet:
		t, ok := a.deps.Catalog.Tenant(id)
		if !ok {
			writeError(ctx, fasthttp.StatusNotFound, "", "no tenant "+id)
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, t)
	case fasthttp.MethodPut:
		var t limit.Tenant
		if fe := decodeStrict(ctx.PostBody(), &t); fe != nil {
			writeError(ctx, fasthttp.StatusBadRequest, fe.Field, fe.Msg)
			return
		}
		if t.ID != "" && t.ID != id {
			writeError(ctx, fasthttp.StatusBadRequest, "id", "the body's id must match the path (or be left out)")
			return
		}
		t.ID = id
		if t.APIKeys == nil {
			t.APIKeys = []string{}
		}
		c, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		if err := a.deps.Writer.PutTenant(c, t); err != nil {
			a.writeFailed(ctx, err)
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, t)
	case fasthttp.MethodDelete:
		c, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		if err := a.deps.Writer.DeleteTenant(c, id); err != nil {
			a.writeFailed(ctx, err)
			return
		}
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	}
}

// writeFailed answers a failed write: 400 for invalid input (naming the
// field), 404 for a missing entry, 409 for a config entry, 503 when the
// store cannot be written.
func (a *Admin) writeFailed(ctx *fasthttp.RequestCtx, err error) {
	var ve *limit.ValidationError
	switch {
	case errors.As(err, &ve):
		writeError(ctx, fasthttp.StatusBadRequest, ve.Field, ve.Msg)
	case errors.Is(err, limit.ErrEntryNotFound):
		writeError(ctx, fasthttp.StatusNotFound, "", "no such entry")
	case errors.Is(err, limit.ErrConfigEntry):
		writeError(ctx, fasthttp.StatusConflict, "", err.Error())
	default:
		writeError(ctx, fasthttp.StatusServiceUnavailable, "", "cannot store the change: "+err.Error())
	}
}
