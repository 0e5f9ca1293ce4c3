package frontend

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/duet-serve/duet/orchestrator"
	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/proto/openai"
	"github.com/duet-serve/duet/router/kvindex"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
	"go.uber.org/zap"
)

const headerRequestID = "X-Request-ID"

// handle routes one request and recovers panics into a 500.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	defer func() {
		if p := recover(); p != nil {
			s.opts.Log.Error("panic in handler", zap.Any("panic", p), zap.ByteString("path", ctx.Path()))
			writeError(ctx, &orchestrator.Error{Status: http.StatusInternalServerError, Message: "internal error"})
		}
	}()
	path, method := string(ctx.Path()), string(ctx.Method())
	ctx.Response.Header.Set(headerRequestID, requestID(ctx))
	switch {
	case path == "/v1/chat/completions":
		s.completion(ctx, method, protocol.EndpointChat)
	case path == "/v1/completions":
		s.completion(ctx, method, protocol.EndpointCompletions)
	case path == adminPrefix || strings.HasPrefix(path, adminPrefix+"/"):
		s.admin(ctx, path, method)
	case strings.HasPrefix(path, modelsPrefix):
		s.model(ctx, method, strings.TrimPrefix(path, modelsPrefix))
	case !getRoutes[path] || (path == "/metrics" && s.metrics == nil):
		writeError(ctx, &orchestrator.Error{Status: http.StatusNotFound, Message: "no route " + path})
	case method != fasthttp.MethodGet && method != fasthttp.MethodHead:
		writeError(ctx, &orchestrator.Error{Status: http.StatusMethodNotAllowed, Message: "method " + method + " not allowed on " + path})
	case path == "/v1/models":
		s.models(ctx)
	case path == "/health":
		s.health(ctx)
	case path == "/version":
		writeJSON(ctx, http.StatusOK, map[string]string{"version": s.opts.Version})
	case path == "/metrics":
		s.metrics(ctx)
	case path == "/cluster_info":
		s.clusterInfo(ctx)
	}
}

// getRoutes are the read-only routes.
var getRoutes = map[string]bool{"/v1/models": true, "/health": true, "/version": true, "/metrics": true, "/cluster_info": true}

// completion serves the two OpenAI generation routes.
func (s *Server) completion(ctx *fasthttp.RequestCtx, method string, ep protocol.Endpoint) {
	id := string(ctx.Response.Header.Peek(headerRequestID))
	if method != fasthttp.MethodPost {
		writeError(ctx, &orchestrator.Error{Status: http.StatusMethodNotAllowed, Message: "use POST"})
		return
	}
	body, failed := s.readBody(ctx)
	if failed != nil {
		writeError(ctx, failed)
		return
	}
	m := s.modelOf(body)
	if m == nil {
		writeError(ctx, s.unknownModel(fastjson.GetString(body, "model")))
		return
	}
	client, stopWatch := watchClient(ctx.Conn())
	resp := m.Orchestrator.Handle(client, orchestrator.Incoming{
		Endpoint: ep, Body: body, RequestID: id, Received: time.Now(), Stopping: ctx.Done(),
		Header: func(name string) string { return string(ctx.Request.Header.Peek(name)) },
	})
	setRouteHeaders(ctx, resp.Route)
	if resp.RetryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(int((resp.RetryAfter+time.Second-1)/time.Second)))
	}
	if !resp.Streaming() {
		stopWatch()
		ctx.SetStatusCode(resp.Status)
		ctx.SetContentType("application/json")
		ctx.SetBody(resp.Body)
		return
	}
	s.stream(ctx, resp, stopWatch)
}

// stream answers with resp's SSE stream; stopWatch ends the client watch
// once the stream is over.
func (s *Server) stream(ctx *fasthttp.RequestCtx, resp *orchestrator.Response, stopWatch func()) {
	ctx.SetStatusCode(resp.Status)
	ctx.SetContentType(openai.ContentTypeSSE)
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	relayed := false
	defer func() {
		if !relayed { // a panic between Handle and handing the stream to fasthttp
			resp.Close()
			stopWatch()
		}
	}()
	if !ctx.Request.Header.IsHTTP11() {
		s.relayClosing(ctx, resp, stopWatch)
	} else {
		ctx.SetBodyStream(&eventStream{resp: resp, stopWatch: stopWatch}, -1)
	}
	relayed = true
}

// hijackStartTimeout bounds the wait for fasthttp to hand over a hijacked
// connection; past it the response is closed (fasthttp skips the hijack
// handler only when the connection already failed).
const hijackStartTimeout = 10 * time.Second

// relayClosing streams resp to an HTTP/1.0 client, which must not get
// Transfer-Encoding: chunked (fasthttp chunks every streamed body): the
// body is delimited by closing the connection. The connection is hijacked
// after the handler returns; duet writes the headers and relays the events
// on it, and fasthttp closes it afterwards. The relay leaves fasthttp's
// bookkeeping, so s.hijacked tracks it for Serve's shutdown, and resp is
// ended exactly once: by the relay, or by a guard when fasthttp never
// hands the connection over. stopWatch runs after either.
func (s *Server) relayClosing(ctx *fasthttp.RequestCtx, resp *orchestrator.Response, stopWatch func()) {
	ctx.Response.Header.SetContentLength(-2) // identity body, Connection: close
	header := append([]byte(nil), ctx.Response.Header.Header()...)
	var owned atomic.Bool
	s.hijacked.Add(1)
	guard := time.AfterFunc(hijackStartTimeout, func() {
		if owned.CompareAndSwap(false, true) {
			defer s.hijacked.Done()
			defer stopWatch()
			resp.Close()
		}
	})
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		if !owned.CompareAndSwap(false, true) {
			return
		}
		guard.Stop()
		defer s.hijacked.Done()
		defer func() {
			if p := recover(); p != nil {
				s.opts.Log.Error("panic in HTTP/1.0 stream", zap.Any("panic", p))
			}
		}()
		defer stopWatch()
		w := bufio.NewWriter(c)
		if _, err := w.Write(header); err != nil {
			resp.Close()
			return
		}
		resp.Relay(w)
	})
}

// maxDrainBytes bounds how much of an over-limit body is read and discarded
// so that the client, still sending, gets the 413 instead of a reset.
const maxDrainBytes = 64 << 20

// readBody returns a copy of the request body, or the error to answer
// (and close the connection with): 413 when the body exceeds the limit
// (checked on Content-Length first, then while reading), 408 when it did
// not arrive within read_timeout. An over-limit body of at most
// maxDrainBytes is drained before the answer.
func (s *Server) readBody(ctx *fasthttp.RequestCtx) ([]byte, *orchestrator.Error) {
	limit := s.opts.Config.MaxBodyBytes
	stream := ctx.RequestBodyStream()
	if cl := ctx.Request.Header.ContentLength(); cl > limit {
		if stream != nil && cl <= maxDrainBytes {
			_, _ = io.Copy(io.Discard, io.LimitReader(stream, int64(cl)))
		}
		ctx.SetConnectionClose()
		return nil, s.readError(fasthttp.ErrBodyTooLarge)
	}
	if stream == nil {
		return append([]byte(nil), ctx.PostBody()...), nil
	}
	b, err := io.ReadAll(io.LimitReader(stream, int64(limit)+1))
	if len(b) > limit {
		_, _ = io.Copy(io.Discard, io.LimitReader(stream, maxDrainBytes))
		ctx.SetConnectionClose()
		return nil, s.readError(fasthttp.ErrBodyTooLarge)
	}
	if err != nil { // too slow (408), or the client went away mid-body
		ctx.SetConnectionClose()
		return nil, s.readError(err)
	}
	return b, nil
}

func setRouteHeaders(ctx *fasthttp.RequestCtx, r orchestrator.Route) {
	if r.Decision != "" {
		ctx.Response.Header.Set("X-Duet-Route", r.Header())
	}
	if r.Ctx != "" {
		ctx.Response.Header.Set("X-Duet-Ctx-Worker", r.Ctx)
	}
	if r.Gen != "" {
		ctx.Response.Header.Set("X-Duet-Gen-Worker", r.Gen)
	}
	if r.MintedSession != "" {
		ctx.Response.Header.Set("X-Session-ID", r.MintedSession)
	}
}

// requestID honours a sane client X-Request-ID, else mints one.
func requestID(ctx *fasthttp.RequestCtx) string {
	if id := string(ctx.Request.Header.Peek(headerRequestID)); id != "" && orchestrator.CheckID(id, 128) == nil {
		return id
	}
	return fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
}

// models serves GET /v1/models: each model's names, then the LoRA adapters
// its workers serve, each with the model as parent, as vLLM lists them.
func (s *Server) models(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, http.StatusOK, s.modelList())
}

func (s *Server) modelList() openai.ModelList {
	list := openai.ModelList{Object: openai.ObjectList, Data: []openai.Model{}}
	for _, m := range s.opts.Models {
		list.Data = append(list.Data, openai.NewModelList("duet", s.started.Unix(), m.Names...).Data...)
		if m.Pool == nil {
			continue
		}
		parent := ""
		if len(m.Names) > 0 {
			parent = m.Names[0]
		}
		for _, a := range m.Pool.Adapters() {
			list.Data = append(list.Data, openai.Model{ID: a, Object: openai.ObjectModel, Created: s.started.Unix(), OwnedBy: "duet", Parent: parent})
		}
	}
	return list
}

// modelsPrefix starts GET /v1/models/{id}, the OpenAI SDKs' models.retrieve.
const modelsPrefix = "/v1/models/"

// model serves GET /v1/models/{id}: the model object when duet serves that
// model (any id when no model list is configured), else a 404. Model ids
// may contain '/' (Hugging Face names), so the whole rest of the path is
// the id.
func (s *Server) model(ctx *fasthttp.RequestCtx, method, id string) {
	anyID := s.single() && len(s.opts.Models[0].Names) == 0 // a single model without names serves any id
	list := s.modelList()
	i := slices.IndexFunc(list.Data, func(m openai.Model) bool { return m.ID == id })
	switch {
	case method != fasthttp.MethodGet && method != fasthttp.MethodHead:
		writeError(ctx, &orchestrator.Error{Status: http.StatusMethodNotAllowed, Message: "method " + method + " not allowed on " + modelsPrefix + "{id}"})
	case i >= 0:
		writeJSON(ctx, http.StatusOK, list.Data[i])
	case id == "" || !anyID:
		writeError(ctx, s.unknownModel(id))
	default: // no model list: any id is served
		writeJSON(ctx, http.StatusOK, openai.NewModelList("duet", s.started.Unix(), id).Data[0])
	}
}

// health is 200 when every model has at least one ctx and one gen worker
// that can take work.
func (s *Server) health(ctx *fasthttp.RequestCtx) {
	if s.single() {
		status, body := modelHealth(&s.opts.Models[0])
		writeJSON(ctx, status, body)
		return
	}
	status, reason, byModel := http.StatusOK, "ok", map[string]any{}
	for i := range s.opts.Models {
		m := &s.opts.Models[i]
		st, body := modelHealth(m)
		if st != http.StatusOK {
			status, reason = st, "a model has no healthy worker of a role"
		}
		byModel[m.Names[0]] = body
	}
	writeJSON(ctx, status, map[string]any{"status": reason, "models": byModel})
}

// modelHealth is one model's health: its status and body.
func modelHealth(m *Model) (int, map[string]any) {
	ctxN := len(m.Pool.Available(disagg.RoleContext))
	genN := len(m.Pool.Available(disagg.RoleGeneration))
	status, reason := http.StatusOK, "ok"
	switch {
	case ctxN == 0 && genN == 0:
		status, reason = http.StatusServiceUnavailable, "no healthy context or generation worker"
	case ctxN == 0:
		status, reason = http.StatusServiceUnavailable, "no healthy context worker"
	case genN == 0:
		status, reason = http.StatusServiceUnavailable, "no healthy generation worker"
	}
	return status, map[string]any{"status": reason, "context_workers": ctxN, "generation_workers": genN}
}

// workerInfo is one worker in /cluster_info.
type workerInfo struct {
	ID            string `json:"id"`
	URL           string `json:"url"`
	Role          string `json:"role"`
	BootstrapPort int    `json:"bootstrap_port,omitempty"`
	Healthy       bool   `json:"healthy"`
	Draining      bool   `json:"draining"`
	LoadTokens    int64  `json:"load_tokens"`
	InFlight      int64  `json:"inflight"`
	Sessions      int    `json:"sessions"`
	// KVCacheTokens is the KV cache the router assumes the worker has, and
	// KVCacheSource where it comes from: worker, config or default.
	KVCacheTokens int64  `json:"kv_cache_tokens"`
	KVCacheSource string `json:"kv_cache_source"`
	// KVBlockSize is the KV block size the worker reported (0: none).
	KVBlockSize int `json:"kv_block_size,omitempty"`
	// MaxModelLen is the context length the worker reported, in tokens (0:
	// none; the orchestrator's configured max_model_len applies).
	MaxModelLen int `json:"max_model_len"`
	// CacheSignal is where the router's view of the worker's cache comes
	// from: estimate, events, or fallback (events that stopped agreeing;
	// CacheSignalReason says why).
	CacheSignal       string `json:"cache_signal"`
	CacheSignalReason string `json:"cache_signal_reason,omitempty"`
	// IndexedBlocks is how many blocks the router's view holds.
	IndexedBlocks int `json:"indexed_blocks"`
}

// clusterInfo serves /cluster_info: the model's workers and router, or,
// with several models, {"models": [...]} of them, each with its name.
func (s *Server) clusterInfo(ctx *fasthttp.RequestCtx) {
	if s.single() {
		writeJSON(ctx, http.StatusOK, modelInfo(&s.opts.Models[0]))
		return
	}
	var all []map[string]any
	for i := range s.opts.Models {
		info := modelInfo(&s.opts.Models[i])
		info["model"] = s.opts.Models[i].Names[0]
		all = append(all, info)
	}
	writeJSON(ctx, http.StatusOK, map[string]any{"models": all})
}

// modelInfo is one model's /cluster_info.
func modelInfo(m *Model) map[string]any {
	rt := m.Orchestrator.Router()
	sessions := rt.SessionsPerWorker()
	var workers []workerInfo
	for _, ep := range m.Pool.All() {
		cacheTokens, cacheSource := rt.CacheSize(ep)
		cache := rt.Cache(ep)
		signal, why := cache.State()
		estimate, events := cache.Held()
		if signal == kvindex.StateEvents {
			estimate = events
		}
		workers = append(workers, workerInfo{ID: ep.ID, URL: ep.URL, Role: string(ep.Role), BootstrapPort: ep.BootstrapPort, Healthy: ep.Healthy(),
			Draining: ep.Draining(), LoadTokens: ep.Load(), InFlight: ep.InFlight(), Sessions: sessions[ep.ID],
			KVCacheTokens: cacheTokens, KVCacheSource: cacheSource, KVBlockSize: ep.KVBlockSize(), MaxModelLen: ep.MaxModelLen(), CacheSignal: string(signal), CacheSignalReason: why, IndexedBlocks: estimate})
	}
	info := map[string]any{"workers": workers, "protocol": m.Orchestrator.Config().Protocol,
		"policy": rt.Policy(), "sessions": rt.Sessions(), "tokenizer": m.Orchestrator.Tokenizer()}
	if m.Fleet != nil {
		info["fleet"] = m.Fleet()
	}
	return info
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, &orchestrator.Error{Status: http.StatusInternalServerError, Message: "encode response", Err: err})
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func writeError(ctx *fasthttp.RequestCtx, e *orchestrator.Error) {
	ctx.SetStatusCode(e.Status)
	ctx.SetContentType("application/json")
	ctx.SetBody(e.JSON())
}
