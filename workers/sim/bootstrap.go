package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// The bootstrap server is what a context worker with protocol sglang serves
// on bootstrap_port, beside its OpenAI port: the place where a decode finds
// the KV of a bootstrap_room. SGLang's own bootstrap server only maps
// prefill ranks to their side channel (GET /route) and the room meets over
// that channel; the sim folds both into one HTTP API:
//
//	GET  /health                                   200 while serving
//	GET  /route?engine_rank=-1&target_dp_group=-1  {"prefill_tp_size":1,"prefill_dp_size":1}, as SGLang
//	GET  /route?engine_rank=0&target_dp_group=0    {"rank_ip":host,"rank_port":port of the OpenAI server}
//	POST /rooms/{room}/pull                        take over the KV pinned for room
//
// POST /rooms/{room}/pull takes a roomPullRequest. It waits up to wait_ms
// (at most maxRoomWait) for the prefill of room to pin its prompt, then
// consumes the pin and answers 200 with the pinned prompt (pinInfo). Errors,
// as OpenAI error bodies: 400 bad room or body; 404 code
// bootstrap_room_unknown, nothing pinned for room within wait_ms (the
// decode asks again); 410 the pin expired; 409 the pin's prompt differs
// from the request's; 503 the worker is shutting down.
const (
	roomPullPattern = "POST /rooms/{room}/pull"
	maxRoomWait     = 5 * time.Second
	codeRoomUnknown = "bootstrap_room_unknown"
)

// roomPullPath is the path of POST /rooms/{room}/pull.
func roomPullPath(room uint64) string { return "/rooms/" + strconv.FormatUint(room, 10) + "/pull" }

// roomPullRequest is the body of POST /rooms/{room}/pull: the decode's view
// of the prompt, checked against the pin, and how long to wait for it.
type roomPullRequest struct {
	PromptTokens int    `json:"prompt_tokens"`
	BlockSize    int    `json:"block_size"`
	LastHash     uint64 `json:"last_block_hash"`
	WaitMs       int64  `json:"wait_ms"`
}

// bootstrapServer is a running bootstrap server; stop ends it.
type bootstrapServer struct {
	srv  *http.Server
	addr string
	done chan error // Serve's result
}

// startBootstrap listens on host:bootstrap_port and serves the bootstrap
// API on a goroutine that stop joins.
func (s *Server) startBootstrap() (*bootstrapServer, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.BootstrapPort)))
	if err != nil {
		return nil, fmt.Errorf("bootstrap_port: %w", err)
	}
	errLog, _ := zap.NewStdLogAt(s.log.Named("bootstrap"), zap.DebugLevel) // a valid level cannot fail
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/route", s.handleBootstrapRoute)
	mux.HandleFunc(roomPullPattern, s.handleRoomPull)
	b := &bootstrapServer{
		srv: &http.Server{
			Handler:           s.recoverHTTP(mux),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          errLog,
		},
		addr: ln.Addr().String(),
		done: make(chan error, 1),
	}
	go func() { b.done <- b.srv.Serve(ln) }()
	return b, nil
}

// stop shuts the server down (its handlers end once the worker aborts) and
// waits for Serve to return.
func (b *bootstrapServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.srv.Shutdown(ctx); err != nil {
		_ = b.srv.Close()
	}
	<-b.done
}

// recoverHTTP turns a handler panic into a 500.
func (s *Server) recoverHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("panic in bootstrap handler", zap.Any("panic", p), zap.String("path", r.URL.Path))
				writeHTTPError(w, &httpError{status: http.StatusInternalServerError, msg: "internal error"})
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// handleBootstrapRoute answers SGLang's rank queries for the one rank the
// sim has, with SGLang's texts for bad queries.
func (s *Server) handleBootstrapRoute(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "Method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rank, group := r.URL.Query().Get("engine_rank"), r.URL.Query().Get("target_dp_group")
	switch {
	case rank == "" || group == "":
		http.Error(w, "Missing inputs for bootstrap server.", http.StatusBadRequest)
	case rank == "-1" && group == "-1":
		writeHTTPJSON(w, map[string]int{"prefill_tp_size": 1, "prefill_dp_size": 1})
	case rank == "0" && group == "0":
		host, port := s.hostPort()
		writeHTTPJSON(w, map[string]any{"rank_ip": host, "rank_port": port})
	default:
		http.Error(w, "Bootstrap info not Found", http.StatusNotFound)
	}
}

// handleRoomPull serves POST /rooms/{room}/pull (see the API above). It
// waits for the room while the request lasts and the worker has not
// aborted.
func (s *Server) handleRoomPull(w http.ResponseWriter, r *http.Request) {
	room, err := strconv.ParseUint(r.PathValue("room"), 10, 64)
	if err != nil || room > maxRoom {
		writeHTTPError(w, badRequest("room", "room: must be an integer in [0, 2^63-1], got %q", r.PathValue("room")))
		return
	}
	var req roomPullRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeHTTPError(w, jsonError(err))
		return
	}
	wait := min(max(time.Duration(req.WaitMs)*time.Millisecond, 0), maxRoomWait)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.abortCtx, cancel)()
	check := func(p pinInfo) error {
		if p.PromptTokens != req.PromptTokens || p.BlockSize != req.BlockSize || p.LastHash != req.LastHash {
			return fmt.Errorf("%w: room %d pinned %d tokens (block size %d), the decode has %d tokens (block size %d) or a different prefix",
				errHandleMismatch, room, p.PromptTokens, p.BlockSize, req.PromptTokens, req.BlockSize)
		}
		return nil
	}
	info, err := s.sched.takePinWait(ctx, sglangPinKey(room), wait, s.clock.now, check)
	switch {
	case errors.Is(err, errHandleUnknown):
		writeHTTPError(w, &httpError{status: http.StatusNotFound, code: codeRoomUnknown,
			msg: fmt.Sprintf("no KV for bootstrap_room %d after %s", room, wait)})
	case errors.Is(err, errHandleExpired):
		s.metrics.pinsExpired.Add(1)
		writeHTTPError(w, &httpError{status: http.StatusGone, code: "kv_handle_expired", msg: fmt.Sprintf("%v: bootstrap_room %d", err, room)})
	case errors.Is(err, errHandleMismatch):
		writeHTTPError(w, &httpError{status: http.StatusConflict, code: "kv_handle_mismatch", msg: err.Error()})
	case err != nil:
		writeHTTPError(w, &httpError{status: http.StatusServiceUnavailable, msg: "worker is shutting down"})
	default:
		s.metrics.pulls.Add(1)
		writeHTTPJSON(w, info)
	}
}

func writeHTTPError(w http.ResponseWriter, e *httpError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body())
}

func writeHTTPJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v) // maps and plain structs, cannot fail
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
