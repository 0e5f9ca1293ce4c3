package protocol

import (
	"encoding/json"
	"fmt"
	"math"
)

// Request id and bootstrap room ranges. The orchestrator draws the values;
// adapters only check them.
const (
	// MinRequestID is the smallest valid Input.RequestID. TensorRT-LLM keeps
	// ids below 2^40 for requests it numbers itself and treats ids in
	// [2^40, 2^63) as global disagg ids, so ids duet mints never collide
	// with an engine's own.
	MinRequestID uint64 = 1 << 40
	// MaxRequestID is the largest valid Input.RequestID (2^63-1): the id
	// must fit a signed 64-bit integer on every engine.
	MaxRequestID uint64 = math.MaxInt64
	// MaxRoom is the largest valid Input.Room (2^63-1), SGLang's range.
	MaxRoom uint64 = math.MaxInt64
)

// Input is everything an adapter needs about one request attempt. The
// orchestrator fills it; adapters read it and never modify or retain it (in
// particular they never keep Body). The same Input must be passed to
// ContextRequest, ParseContextResponse and GenerationRequest of one attempt;
// a retry is a new attempt with a new RequestID (and Room).
type Input struct {
	// Endpoint is the route the client called; required.
	Endpoint Endpoint
	// Body is the client's request body: a JSON object already validated by
	// the frontend, with every disagg.InternalFields key removed. Adapters
	// remove those keys again before adding their own, so a client value
	// can never reach a worker even if a caller forgets.
	Body []byte
	// RequestID is TensorRT-LLM's disagg_request_id, unique per attempt and
	// shared by both legs; required, in [MinRequestID, MaxRequestID].
	RequestID uint64
	// RequestIDText is the X-Request-Id header vLLM gets on both legs. It
	// must be unique per attempt (do not pass the client's X-Request-ID
	// as is: a retry would reuse it). Empty means the decimal RequestID.
	RequestIDText string
	// ConversationID is the session key forwarded to TensorRT-LLM workers
	// as disaggregated_params.conversation_id; empty means none (the key is
	// then omitted).
	ConversationID string
	// CtxWorker is where the chosen ctx worker can be reached by the gen
	// worker; SGLang needs it, the other adapters ignore it.
	CtxWorker WorkerAddr
	// PromptTokenIDs, when not nil, is the prompt as a JSON array of token
	// ids, sent instead of the body's messages or prompt by an adapter whose
	// engine does not continue a final message (see
	// Adapter.ContinuesFinalMessage); the others ignore it.
	PromptTokenIDs json.RawMessage
	// Room is SGLang's bootstrap_room, drawn at random by the orchestrator
	// per attempt, in [0, MaxRoom].
	Room uint64
}

// WorkerAddr locates a ctx worker for a gen worker.
type WorkerAddr struct {
	// Host is the worker's host name or IP address as the gen worker can
	// reach it, without scheme or port (the host part of the worker URL).
	Host string
	// BootstrapPort is SGLang's prefill bootstrap port; 0 means unknown:
	// the request carries null and the decode worker uses its own port.
	BootstrapPort int
}

// Validate checks the fields every adapter relies on: a valid Endpoint, a
// non-empty Body, RequestID in [MinRequestID, MaxRequestID], Room at most
// MaxRoom, a RequestIDText fit for a header value (no control characters),
// PromptTokenIDs nil or a JSON array, and a BootstrapPort in [0, 65535]. It does not parse Body. Errors
// wrap ErrBadInput. Adapters call it first; the orchestrator may call it
// earlier.
func (in *Input) Validate() error {
	switch {
	case !in.Endpoint.Valid():
		return fmt.Errorf("%w: endpoint %s", ErrBadInput, in.Endpoint)
	case len(in.Body) == 0:
		return fmt.Errorf("%w: empty body", ErrBadInput)
	case in.RequestID < MinRequestID || in.RequestID > MaxRequestID:
		return fmt.Errorf("%w: request id %d outside [%d, %d]", ErrBadInput, in.RequestID, MinRequestID, MaxRequestID)
	case in.Room > MaxRoom:
		return fmt.Errorf("%w: bootstrap room %d above %d", ErrBadInput, in.Room, MaxRoom)
	case !headerSafe(in.RequestIDText):
		return fmt.Errorf("%w: request id text %q has control characters", ErrBadInput, in.RequestIDText)
	case in.PromptTokenIDs != nil && !json.Valid(in.PromptTokenIDs) || len(in.PromptTokenIDs) > 0 && in.PromptTokenIDs[0] != '[':
		return fmt.Errorf("%w: prompt token ids are not a JSON array", ErrBadInput)
	case in.CtxWorker.BootstrapPort < 0 || in.CtxWorker.BootstrapPort > math.MaxUint16:
		return fmt.Errorf("%w: bootstrap port %d outside [0, 65535]", ErrBadInput, in.CtxWorker.BootstrapPort)
	}
	return nil
}

// headerSafe reports whether s can be sent as a header value as is.
func headerSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
