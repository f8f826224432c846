package admin

import (
	"context"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
)

// listPolicies answers GET /v1/policies: the file's and the API's, each
// with its origin.
func (s *Server) listPolicies(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"policies": s.deps.Writer.Policies()})
}

// putPolicy answers PUT /v1/policies/{name}: 201 with the policy as it
// applies when the API had no policy of that name, 200 when it replaced
// one. The body is a policy of the file's `policies` without the name (or
// with the path's); the writer checks it as the file's are checked.
func (s *Server) putPolicy(ctx *fasthttp.RequestCtx, name string) {
	var p catalog.Policy
	if !decodeNamed(ctx, &p, "name", &p.Name, name) {
		return
	}
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
