package admin

import (
	"strings"

	"github.com/valyala/fasthttp"
)

// reloadAnswer is the body of POST /v1/reload.
type reloadAnswer struct {
	Status  string   `json:"status"`
	Applied []string `json:"applied"`
	// Restart lists the changed keys that take effect only after a restart.
	Restart []string `json:"restart_required"`
	Error   string   `json:"error,omitempty"`
	Errors  []string `json:"errors,omitempty"`
}

// reload re-reads the configuration: 200 with what was applied and what
// needs a restart, or 400 with the errors of an invalid file (the running
// configuration stays).
func (s *Server) reload(ctx *fasthttp.RequestCtx) {
	if s.deps.Reload == nil {
		writeError(ctx, fasthttp.StatusNotFound, "path", "reload is not available")
		return
	}
	applied, restart, err := s.deps.Reload()
	if applied == nil {
		applied = []string{}
	}
	if restart == nil {
		restart = []string{}
	}
	if err != nil {
		lines := strings.Split(err.Error(), "\n")
		writeJSON(ctx, fasthttp.StatusBadRequest, reloadAnswer{Status: "invalid configuration; the running one stays",
			Applied: applied, Restart: restart, Error: "config: " + lines[0], Errors: lines})
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, reloadAnswer{Status: "reloaded", Applied: applied, Restart: restart})
}
