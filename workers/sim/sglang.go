package sim

import (
	"encoding/json"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/proto/openai"
)

// maxRoom is the largest valid bootstrap_room, 2^63-1 (SGLang's routers
// draw rooms in [0, 2^63-1]).
const maxRoom = math.MaxInt64

// sglangPinKey is the pin key of a room's prompt blocks on a context worker.
func sglangPinKey(room uint64) string { return "sgl-" + strconv.FormatUint(room, 10) }

// classifySGLang sets j's phase from this worker's role, as SGLang takes it
// from --disaggregation-mode rather than from the body (both legs get the
// same body): context prefills, generation decodes, and mixed serves every
// request aggregated, ignoring the bootstrap fields as an SGLang server
// without a disaggregation mode does. A prefill or decode needs
// bootstrap_room; a decode also needs bootstrap_host, and a null
// bootstrap_port means this worker's own bootstrap_port.
func (s *Server) classifySGLang(j *job, ef engineFields) *httpError {
	switch s.role {
	case disagg.RoleMixed:
		return nil
	case disagg.RoleContext:
		j.phase, j.limit = phaseContext, 1
	default:
		j.phase = phaseGeneration
	}
	if ef.BootstrapRoom == nil {
		herr := badRequest(disagg.FieldBootstrapRoom, "Invalid request: Disaggregated request received without bootstrap room id. req.rid=%q", j.requestID)
		herr.inStream = j.stream
		return herr
	}
	if *ef.BootstrapRoom > maxRoom {
		return badRequest(disagg.FieldBootstrapRoom, "bootstrap_room: must be in [0, 2^63-1], got %d", *ef.BootstrapRoom)
	}
	j.room = *ef.BootstrapRoom
	if j.phase == phaseContext {
		return nil // the prefill serves its own bootstrap port; host and port are the decode's business
	}
	if ef.BootstrapHost == nil || strings.TrimSpace(*ef.BootstrapHost) == "" {
		return badRequest(disagg.FieldBootstrapHost, "bootstrap_host: required on a decode request")
	}
	port := s.cfg.BootstrapPort
	if ef.BootstrapPort != nil {
		port = *ef.BootstrapPort
	}
	if port < 1 || port > 65535 {
		return badRequest(disagg.FieldBootstrapPort, "bootstrap_port: must be in [1, 65535], got %d (a null port means this worker's bootstrap_port)", port)
	}
	base := "http://" + net.JoinHostPort(strings.Trim(*ef.BootstrapHost, "[]"), strconv.Itoa(port))
	j.remote = &remoteKV{url: base, key: sglangPinKey(j.room)}
	return nil
}

// fail answers a completion request with e in the protocol's error format.
// SGLang writes its flat ErrorResponse, or, for errors it reports after a
// stream began (e.inStream), a 200 SSE stream holding one error event and
// [DONE]. The other protocols write the OpenAI error body.
func (s *Server) fail(ctx *fasthttp.RequestCtx, e *httpError) {
	if s.cfg.Protocol != ProtocolSGLang {
		writeError(ctx, e)
		return
	}
	ctx.Response.Reset()
	if e.inStream {
		ctx.SetStatusCode(http.StatusOK)
		ctx.SetContentType(openai.ContentTypeSSE)
		ctx.Response.Header.Set("Cache-Control", "no-cache")
		ctx.SetBody(sglangStreamError(e))
		return
	}
	ctx.SetStatusCode(e.status)
	ctx.SetContentType("application/json")
	ctx.SetBody(sglangErrorBody(e))
}

// sglangErrorBody is a non-streaming SGLang error: create_error_response's
// BadRequestError for validation errors, and the HTTPException handler's
// type (the status as a string) for aborts from the scheduler.
func sglangErrorBody(e *httpError) []byte {
	typ := strconv.Itoa(e.status)
	switch e.status {
	case http.StatusBadRequest:
		typ = "BadRequestError"
	case http.StatusNotFound:
		typ = "NotFoundError"
	}
	b, _ := json.Marshal(newFlatError(e, typ)) // plain struct, cannot fail
	return b
}

// sglangStreamError is the SSE body SGLang sends when a streaming request
// aborts: create_streaming_error_response's event, whose type is the
// status's Python HTTPStatus name (or e.streamType) and which Python's
// json.dumps writes with spaces after ':' and ',', then [DONE].
func sglangStreamError(e *httpError) []byte {
	name := e.streamType
	if name == "" {
		name = strings.ToUpper(strings.ReplaceAll(http.StatusText(e.status), " ", "_"))
	}
	b, _ := json.Marshal(struct {
		Error flatError `json:"error"`
	}{newFlatError(e, name)}) // plain struct, cannot fail
	out := append([]byte("data: "), pyDumps(b)...)
	return append(out, "\n\ndata: [DONE]\n\n"...)
}
