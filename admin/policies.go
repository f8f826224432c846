package admin

import (
	"context"
	"strings"

	"github.com/sentinel-gateway/sentinel/limit/policy"
	"github.com/valyala/fasthttp"
)

// listPolicies answers GET /v1/policies: the file's and the API's, each
// with its origin.
func (s *Server) listPolicies(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"policies": s.deps.Writer.Policies()})
}

// policy answers GET, PUT and DELETE /v1/policies/{name}.
func (s *Server) policy(ctx *fasthttp.RequestCtx) {
	name := strings.TrimPrefix(string(ctx.Path()), policyPrefix)
	if name == "" || strings.Contains(name, "/") {
		writeError(ctx, fasthttp.StatusNotFound, "path", "want /v1/policies/{name}")
		return
	}
	s.entry(ctx, entryAPI{
		missing: "no policy " + name, entry: "policy " + name, field: "policies",
		get: func() (any, bool) {
			p, ok := s.deps.Writer.Policy(name)
			return p, ok
		},
		put: func(ctx *fasthttp.RequestCtx) { s.putPolicy(ctx, name) },
		del: func(c context.Context) error { return s.deps.Writer.DeletePolicy(c, name) },
	})
}

// putPolicy answers PUT /v1/policies/{name}: 201 with the policy as it
// applies when the API had no policy of that name, 200 when it replaced
// one. The body is a policy of the file's `policies` without the name (or
// with the path's); the writer checks it as the file's are checked.
func (s *Server) putPolicy(ctx *fasthttp.RequestCtx, name string) {
	var p policy.Config
	if fe := decodeStrict(ctx.PostBody(), &p); fe != nil {
		writeBodyError(ctx, fe)
		return
	}
	if !samePath(ctx, "name", p.Name, name) {
		return
	}
	p.Name = name
	created := false
	err := s.store(func(c context.Context) (err error) {
		created, err = s.deps.Writer.PutPolicy(c, p)
		return err
	})
	status := fasthttp.StatusOK
	if created {
		status = fasthttp.StatusCreated
	}
	stored, _ := s.deps.Writer.Policy(name)
	s.answerChange(ctx, err, status, stored)
}
