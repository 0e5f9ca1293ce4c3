package frontend

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/duet-serve/duet/orchestrator"
	"github.com/duet-serve/duet/proto/openai"
	"github.com/duet-serve/duet/router"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// Model is one model the server serves: the names clients send for it, the
// pipeline and the workers that serve it, and their admin.
type Model struct {
	// Names are the model's name, then its aliases; a request whose
	// "model" is one of them (or, for SGLang, "NAME:ADAPTER"; for vLLM, an
	// adapter its workers serve) is this model's. Empty: every request.
	Names        []string
	Orchestrator *orchestrator.Orchestrator
	Pool         *router.Pool
	// Fleet, when set, adds the fleet's view to /cluster_info.
	Fleet func() any
	// Admin serves the admin API for the model's workers; nil: none.
	Admin Admin
}

// initModels makes Options' single model, when Models is empty, the one
// model, and indexes the models by name.
func (s *Server) initModels() error {
	o := &s.opts
	if len(o.Models) == 0 {
		var names []string
		if o.Orchestrator != nil {
			names = o.Orchestrator.Config().Models
		}
		o.Models = []Model{{Names: names, Orchestrator: o.Orchestrator, Pool: o.Pool, Fleet: o.Fleet, Admin: o.Admin}}
	}
	s.byName = map[string]*Model{}
	for i := range o.Models {
		m := &o.Models[i]
		if len(o.Models) > 1 && len(m.Names) == 0 {
			return fmt.Errorf("frontend: model %d of %d has no name", i+1, len(o.Models))
		}
		for _, n := range m.Names {
			if s.byName[n] != nil {
				return fmt.Errorf("frontend: model name %q is served twice", n)
			}
			s.byName[n] = m
		}
	}
	return nil
}

// single reports whether one model serves every request.
func (s *Server) single() bool { return len(s.opts.Models) == 1 }

// modelOf returns the model a request body asks for, nil when none serves
// it: the only model, else the one that has the body's "model" among its
// names, the base of an SGLang "NAME:ADAPTER", or a vLLM adapter its
// workers serve.
func (s *Server) modelOf(body []byte) *Model {
	if s.single() {
		return &s.opts.Models[0]
	}
	name := fastjson.GetString(body, "model")
	if m := s.byName[name]; m != nil {
		return m
	}
	if base, _, ok := strings.Cut(name, ":"); ok && s.byName[base] != nil {
		return s.byName[base]
	}
	for i := range s.opts.Models {
		if m := &s.opts.Models[i]; name != "" && m.Pool.HasAdapter(name) {
			return m
		}
	}
	return nil
}

// unknownModel is the 404 of a request for model name, which no model
// serves.
func (s *Server) unknownModel(name string) *orchestrator.Error {
	return &orchestrator.Error{Status: http.StatusNotFound, Type: openai.ErrTypeNotFound, Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("model %q does not exist (served: %s)", name, strings.Join(s.modelIDs(), ", "))}
}

// modelIDs lists every id /v1/models lists.
func (s *Server) modelIDs() []string {
	list := s.modelList()
	ids := make([]string, len(list.Data))
	for i, m := range list.Data {
		ids[i] = m.ID
	}
	return ids
}

// adminModel returns the model an admin request is about: the only one, or
// the one its ?model= names.
func (s *Server) adminModel(ctx *fasthttp.RequestCtx) (*Model, *orchestrator.Error) {
	if s.single() {
		return &s.opts.Models[0], nil
	}
	name := string(ctx.QueryArgs().Peek("model"))
	if m := s.byName[name]; m != nil {
		return m, nil
	}
	var names []string
	for _, m := range s.opts.Models {
		names = append(names, m.Names[0])
	}
	return nil, &orchestrator.Error{Status: http.StatusBadRequest, Param: "model",
		Message: fmt.Sprintf("several models are served: name one with ?model= (one of %s), got %q", strings.Join(names, ", "), name)}
}
