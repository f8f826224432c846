package admin

import (
	"context"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// counterScopes are the scopes DELETE /v1/counters resets, with their
// resets counted.
var counterScopes = map[string]limit.Scope{
	"ip": limit.ScopeIP, "api_key": limit.ScopeAPIKey, "tenant": limit.ScopeTenant, "rule": limit.ScopeRule,
}

// storeScopes name the store keys of the derived limits' budgets, as the
// limiter builds them (limit/specs.go): "{ip:<ip>}", "{key:<api key>}",
// "{tenant:<id>}", "{rule:<tenant>:<resource>[:<ip>]}". The end-to-end
// tests reset each and see the budget come back.
var storeScopes = map[limit.Scope]string{limit.ScopeIP: "ip", limit.ScopeAPIKey: "key", limit.ScopeTenant: "tenant", limit.ScopeRule: "rule"}

var resetCounts = func() map[string]*metrics.Counter {
	m := map[string]*metrics.Counter{}
	for name := range counterScopes {
		m[name] = metrics.NewCounter(`sentinel_limit_resets_total{scope="` + name + `"}`)
	}
	return m
}()

// counterTarget is the budget a reset names: its scope and key as the
// request said them, and its store key and params.
type counterTarget struct {
	scope, key string
	storeKey   []byte
	params     store.Params
}

// resetCounter serves DELETE /v1/counters?scope=S&key=K: the budget of one
// key is whole again on every pod. The store drops its counts, then every
// pod hears of it (Deps.Resets) and drops what it holds for the key. Each reset is logged with the admin request's peer.
func (s *Server) resetCounter(ctx *fasthttp.RequestCtx) {
	t, status, fe := s.counterTarget(ctx.QueryArgs())
	if fe != nil {
		writeError(ctx, status, fe.Field, fe.Msg)
		return
	}
	c, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if err := s.deps.Limiter.Reset(c, t.storeKey, t.params); err != nil {
		writeError(ctx, fasthttp.StatusServiceUnavailable, "", "cannot reset the counter: "+err.Error())
		return
	}
	slog.Info("admin: counter reset", "peer", ctx.RemoteAddr().String(), "scope", t.scope, "key", t.key, "store_key", string(t.storeKey))
	resetCounts[t.scope].Inc()
	if s.deps.Resets == nil {
		writeJSON(ctx, fasthttp.StatusOK, map[string]string{"scope": t.scope, "key": t.key})
		return
	}
	if err := s.deps.Resets.Publish(c, string(t.storeKey)); err != nil {
		writeError(ctx, fasthttp.StatusServiceUnavailable, "", "the counter was reset in the store, but not every pod was told "+
			"(each drops its leased permits within a lease lifetime): "+err.Error())
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]string{"scope": t.scope, "key": t.key})
}

// counterTarget reads and checks scope and key: 400 naming the field for a
// missing or malformed one, 404 for a scope, tenant or rule that does not
// exist.
func (s *Server) counterTarget(args *fasthttp.Args) (counterTarget, int, *catalog.ValidationError) {
	t := counterTarget{scope: string(args.Peek("scope")), key: string(args.Peek("key"))}
	if t.scope == "" {
		return t, fasthttp.StatusBadRequest, badField("scope", "missing; want one of api_key, ip, rule, tenant")
	}
	scope, ok := counterScopes[t.scope]
	if !ok {
		return t, fasthttp.StatusNotFound, badField("scope", strconv.Quote(t.scope)+" is not one of api_key, ip, rule, tenant")
	}
	if fe := checkName("key", t.key, true, maxKeyLen); fe != nil {
		return t, fasthttp.StatusBadRequest, fe
	}
	parts, status, fe := s.counterParts(scope, t.key)
	if fe != nil {
		return t, status, fe
	}
	t.storeKey = store.AppendKeyStrings(nil, "", storeScopes[scope], parts...)
	return t, 0, nil
}

// counterParts are the parts of scope's store key for the key value: the
// IP in the proxy's text form, the API key, a known tenant, or a rule's
// tenant and resource ("tenant/resource", "*anonymous*/resource/IP").
func (s *Server) counterParts(scope limit.Scope, key string) ([]string, int, *catalog.ValidationError) {
	switch scope {
	case limit.ScopeIP:
		ip, err := netip.ParseAddr(key)
		if err != nil {
			return nil, fasthttp.StatusBadRequest, badField("key", strconv.Quote(key)+" is not an IP address")
		}
		return []string{ip.Unmap().String()}, 0, nil
	case limit.ScopeTenant:
		if _, ok := s.deps.Catalog.Tenant(key); !ok {
			return nil, fasthttp.StatusNotFound, badField("key", "no tenant "+strconv.Quote(key))
		}
	case limit.ScopeRule:
		return s.ruleParts(key)
	}
	return []string{key}, 0, nil
}

// ruleParts reads a rule's key: "tenant/resource", or for the anonymous
// rule, which limits each client IP, "*anonymous*/resource/IP".
func (s *Server) ruleParts(key string) ([]string, int, *catalog.ValidationError) {
	parts := strings.SplitN(key, "/", 3)
	anon := parts[0] == catalog.AnonymousTenant
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" || anon != (len(parts) == 3) {
		return nil, fasthttp.StatusBadRequest, badField("key", strconv.Quote(key)+
			" is not tenant/resource, or "+catalog.AnonymousTenant+"/resource/IP for the anonymous rule")
	}
	if _, ok := s.deps.Catalog.Rule(parts[0], parts[1]); !ok {
		return nil, fasthttp.StatusNotFound, badField("key", "no rule for tenant "+strconv.Quote(parts[0])+" and resource "+strconv.Quote(parts[1]))
	}
	if anon {
		ip, err := netip.ParseAddr(parts[2])
		if err != nil {
			return nil, fasthttp.StatusBadRequest, badField("key", strconv.Quote(parts[2])+" is not an IP address")
		}
		parts[2] = ip.Unmap().String()
	}
	return parts, 0, nil
}
