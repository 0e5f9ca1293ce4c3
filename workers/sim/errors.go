package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"github.com/valyala/fasthttp"

	"github.com/duet-serve/duet/proto/openai"
)

// httpError is an error answered with an HTTP status and an OpenAI error
// body. Only handlers turn errors into responses.
type httpError struct {
	status int
	msg    string
	param  string
	code   string
	// inStream marks an error SGLang reports inside a 200 SSE stream when
	// the request streams (an abort by its scheduler); see Server.fail.
	inStream bool
	// streamType is the type of that in-stream error: "" for the status's
	// Python HTTPStatus name (an abort), "BadRequestError" for a ValueError
	// the stream generator catches (create_streaming_error_response).
	streamType string
	// wire, when set, is the body exactly as the engine writes it (see
	// enginefail.go), sent instead of the OpenAI error body.
	wire []byte
}

func (e *httpError) Error() string { return fmt.Sprintf("%d: %s", e.status, e.msg) }

// body is the error's response body: the engine's own (wire) when set,
// else an OpenAI error body.
func (e *httpError) body() []byte {
	if e.wire != nil {
		return e.wire
	}
	return openai.NewError(e.msg, openai.TypeForStatus(e.status), e.param, e.code).JSON()
}

func badRequest(param, format string, args ...any) *httpError {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...), param: param}
}

// writeError answers ctx with e.
func writeError(ctx *fasthttp.RequestCtx, e *httpError) {
	ctx.Response.Reset()
	ctx.SetStatusCode(e.status)
	ctx.SetContentType("application/json")
	ctx.SetBody(e.body())
}

// jsonError turns a json.Unmarshal error of a request body into a 400.
func jsonError(err error) *httpError {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return badRequest("", "invalid JSON body: %v", err)
	case errors.As(err, &typ):
		field := jsonPath(typ.Field)
		if field == "" {
			return badRequest("", "invalid JSON body: expected a JSON object, got %s", typ.Value)
		}
		return badRequest(field, "%s: expected %s, got JSON %s", field, jsonKind(typ.Type.String()), typ.Value)
	default:
		return badRequest("", "invalid request body: %v", err)
	}
}

// jsonPath drops the Go names of embedded structs from an
// UnmarshalTypeError field path ("ChatRequest.max_tokens" -> "max_tokens",
// "engineFields.bootstrap_room" -> "bootstrap_room"): the request's JSON
// keys are all lower case, and every Go type name has an upper-case letter.
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "" && !strings.ContainsFunc(p, unicode.IsUpper) {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

// jsonKind names a Go type the way an API user thinks of it.
func jsonKind(goType string) string {
	switch goType {
	case "int", "*int", "int64", "*int64", "uint64", "*uint64":
		return "an integer"
	case "float64", "*float64":
		return "a number"
	case "bool", "*bool":
		return "a boolean"
	case "string", "*string":
		return "a string"
	}
	return "a value of type " + goType
}

// ErrorHandler-facing errors of the fasthttp server itself.
func serverErrorFor(err error) *httpError {
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return &httpError{status: http.StatusRequestEntityTooLarge, msg: "request body too large", code: "body_too_large"}
	case errors.As(err, &small):
		return &httpError{status: http.StatusRequestHeaderFieldsTooLarge, msg: "request headers too large", code: "headers_too_large"}
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return &httpError{status: http.StatusRequestTimeout, msg: "timed out reading the request"}
	}
	return badRequest("", "malformed HTTP request")
}
