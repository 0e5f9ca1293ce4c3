package frontend

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/duet-serve/duet/orchestrator"
	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/valyala/fasthttp"
)

// Admin changes the set of workers the router uses. Implementations are
// safe for concurrent use.
type Admin interface {
	// AddWorker adds a pre-launched worker; ErrConflict when the ID exists.
	AddWorker(m router.Member) error
	// RemoveWorker takes a worker out of routing; ErrNotFound when unknown.
	RemoveWorker(id string) error
	// SetDraining stops or resumes new work to a worker; with migrate, a
	// drain also moves the worker's streams in flight to other workers
	// (their calls to it give up; see router.Endpoint.Watch). ErrNotFound
	// when unknown.
	SetDraining(id string, draining, migrate bool) error
}

// Errors an Admin wraps, mapped to 409 and 404.
var (
	ErrConflict = errors.New("conflict")
	ErrNotFound = errors.New("not found")
)

const adminPrefix = "/admin/workers"

// admin serves:
//
//	GET    /admin/workers             the workers (as /cluster_info)
//	POST   /admin/workers             {"id","url","role"[,"bootstrap_port"]}: add a pre-launched worker
//	DELETE /admin/workers/{id}        remove a worker from routing
//	POST   /admin/workers/{id}/drain  stop new work to it (/undrain resumes);
//	                                  body {"migrate":true}: also move its
//	                                  streams in flight to other workers
//
// with "Authorization: Bearer <server.admin_token>". Without a token
// configured the routes do not exist (404).
func (s *Server) admin(ctx *fasthttp.RequestCtx, path, method string) {
	if s.opts.Config.AdminToken == "" || !s.hasAdmin() {
		writeError(ctx, &orchestrator.Error{Status: http.StatusNotFound, Message: "no route " + path + " (the admin API is disabled: set server.admin_token)"})
		return
	}
	if !s.authorized(ctx) {
		ctx.Response.Header.Set("WWW-Authenticate", "Bearer")
		writeError(ctx, &orchestrator.Error{Status: http.StatusUnauthorized, Message: "missing or wrong bearer token"})
		return
	}
	m, bad := s.adminModel(ctx)
	if bad != nil {
		writeError(ctx, bad)
		return
	}
	rest := strings.Trim(strings.TrimPrefix(path, adminPrefix), "/")
	id, action, _ := strings.Cut(rest, "/")
	var err error
	switch {
	case rest == "" && method == fasthttp.MethodGet:
		writeJSON(ctx, http.StatusOK, modelInfo(m))
		return
	case rest == "" && method == fasthttp.MethodPost:
		err = addWorker(m.Admin, ctx.PostBody())
	case id != "" && action == "" && method == fasthttp.MethodDelete:
		err = m.Admin.RemoveWorker(id)
	case id != "" && action == "drain" && method == fasthttp.MethodPost:
		var migrate bool
		if migrate, err = drainMigrates(ctx.PostBody()); err == nil {
			err = m.Admin.SetDraining(id, true, migrate)
		}
	case id != "" && action == "undrain" && method == fasthttp.MethodPost:
		err = m.Admin.SetDraining(id, false, false)
	default:
		writeError(ctx, &orchestrator.Error{Status: http.StatusNotFound, Message: "no admin route " + method + " " + path})
		return
	}
	if err != nil {
		writeError(ctx, adminError(err))
		return
	}
	writeJSON(ctx, http.StatusOK, map[string]string{"status": "ok"})
}

// drainMigrates reads a drain's optional body, {"migrate": bool}.
func drainMigrates(body []byte) (bool, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return false, nil
	}
	var d struct {
		Migrate *bool `json:"migrate"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil || d.Migrate == nil {
		return false, &orchestrator.Error{Status: http.StatusBadRequest, Param: "migrate",
			Message: `drain body must be empty or {"migrate": true|false}`}
	}
	return *d.Migrate, nil
}

func (s *Server) authorized(ctx *fasthttp.RequestCtx) bool {
	got, ok := strings.CutPrefix(string(ctx.Request.Header.Peek("Authorization")), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Config.AdminToken)) == 1
}

// addRequest is the POST /admin/workers body.
type addRequest struct {
	ID   string `json:"id"`
	URL  string `json:"url"`
	Role string `json:"role"`
	// BootstrapPort is an SGLang prefill worker's bootstrap port (0 or
	// absent: unknown; the decode worker uses its own). Only a context or
	// mixed worker has one.
	BootstrapPort int `json:"bootstrap_port"`
}

// hasAdmin reports whether every model has an admin.
func (s *Server) hasAdmin() bool {
	for _, m := range s.opts.Models {
		if m.Admin == nil {
			return false
		}
	}
	return true
}

func addWorker(admin Admin, body []byte) error {
	var a addRequest
	if err := json.Unmarshal(body, &a); err != nil {
		return &orchestrator.Error{Status: http.StatusBadRequest, Message: "body must be {\"id\",\"url\",\"role\"}: " + err.Error()}
	}
	role, err := disagg.ParseRole(a.Role)
	switch {
	case a.ID == "" || strings.ContainsAny(a.ID, "/ "):
		return &orchestrator.Error{Status: http.StatusBadRequest, Param: "id", Message: "id must be non-empty without '/' or spaces"}
	case !strings.HasPrefix(a.URL, "http://") && !strings.HasPrefix(a.URL, "https://"):
		return &orchestrator.Error{Status: http.StatusBadRequest, Param: "url", Message: "url must start with http:// or https://"}
	case err != nil:
		return &orchestrator.Error{Status: http.StatusBadRequest, Param: "role", Message: "role: " + err.Error()}
	case a.BootstrapPort < 0 || a.BootstrapPort > 65535:
		return &orchestrator.Error{Status: http.StatusBadRequest, Param: "bootstrap_port",
			Message: fmt.Sprintf("bootstrap_port must be in 1..65535 (or 0: unknown), got %d", a.BootstrapPort)}
	case a.BootstrapPort != 0 && !role.ServesContext():
		return &orchestrator.Error{Status: http.StatusBadRequest, Param: "bootstrap_port",
			Message: "bootstrap_port is an SGLang prefill worker's: a generation worker has none"}
	}
	return admin.AddWorker(router.Member{ID: a.ID, URL: strings.TrimRight(a.URL, "/"), Role: role, BootstrapPort: a.BootstrapPort})
}

func adminError(err error) *orchestrator.Error {
	var e *orchestrator.Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, ErrConflict):
		return &orchestrator.Error{Status: http.StatusConflict, Message: err.Error()}
	case errors.Is(err, ErrNotFound):
		return &orchestrator.Error{Status: http.StatusNotFound, Message: err.Error()}
	}
	return &orchestrator.Error{Status: http.StatusInternalServerError, Message: err.Error()}
}
