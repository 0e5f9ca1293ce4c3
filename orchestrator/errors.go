package orchestrator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/duet-serve/duet/proto/openai"
	"github.com/duet-serve/duet/router"
	"github.com/valyala/fastjson"
)

// Error is a failure the client sees: an HTTP status and an OpenAI error
// body. Only the frontend turns it into HTTP.
type Error struct {
	Status  int
	Type    string
	Message string
	Param   string
	Code    string
	// Body, when set, is a worker's own error body relayed as is.
	Body []byte
	// RetryAfter, when > 0, is sent as a Retry-After header (whole seconds).
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %v", e.Status, e.Message, e.Err)
	}
	return fmt.Sprintf("%d %s", e.Status, e.Message)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// JSON returns the OpenAI error body.
func (e *Error) JSON() []byte {
	if e.Body != nil {
		return e.Body
	}
	typ := e.Type
	if typ == "" {
		typ = openai.TypeForStatus(e.Status)
	}
	return openai.NewError(e.Message, typ, e.Param, e.Code).JSON()
}

// badRequest is a 400 about one request field.
func badRequest(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: openai.ErrTypeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// AsError converts any error into an *Error (500 when it is not one).
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Message: "internal error", Err: err}
}

// workerError is a failed call to a worker. Retryable failures (connect
// errors, 5xx, timeouts, protocol violations) move the attempt to another
// worker; a 4xx is the request's fault and is relayed to the client.
type workerError struct {
	phase   string // "context" or "generation"
	worker  string
	status  int    // 0 when no response
	body    []byte // the worker's error body, if any
	timeout bool
	// afterHandle marks a gen worker's answer to a request carrying a KV
	// handle: the ctx worker accepted the same body, so a 4xx is about the
	// handle (spent, expired, unknown) and worth a fresh attempt.
	afterHandle bool
	err         error
}

// callFailed is a call to ep that got no usable answer; err is the
// transport's or the stream's.
func callFailed(phase string, ep *router.Endpoint, err error) *workerError {
	return &workerError{phase: phase, worker: ep.ID, timeout: errors.Is(err, errTimeout), err: err}
}

func (e *workerError) Error() string {
	switch {
	case e.status != 0:
		return fmt.Sprintf("%s phase on %s: status %d: %s", e.phase, e.worker, e.status, truncate(e.body, 200))
	default:
		return fmt.Sprintf("%s phase on %s: %v", e.phase, e.worker, e.err)
	}
}

func (e *workerError) Unwrap() error { return e.err }

// refusedHandle reports a gen worker's 4xx to a request carrying a KV
// handle: the handle may be spent or expired (worth one fresh context
// phase), or the gen worker rejects what the ctx worker accepted (then
// retrying cannot help).
func (e *workerError) refusedHandle() bool {
	return e.afterHandle && e.status >= 400 && e.status < 500 && e.status != http.StatusTooManyRequests
}

func (e *workerError) retryable() bool {
	return e.status == 0 || e.status >= 500 || e.status == http.StatusTooManyRequests || e.afterHandle
}

// clientError is what the client sees once retries are exhausted or the
// failure is not retryable.
func (e *workerError) clientError() *Error {
	switch {
	case e.timeout:
		return &Error{Status: http.StatusGatewayTimeout, Message: fmt.Sprintf("%s phase timed out", e.phase), Err: e}
	case e.status == http.StatusTooManyRequests:
		return &Error{Status: http.StatusServiceUnavailable, Message: fmt.Sprintf("%s workers are saturated: retry later", e.phase),
			RetryAfter: time.Second, Err: e}
	case e.status >= 400 && e.status < 500:
		re := relayedError(e.phase, e.status, e.body)
		re.Err = e
		return re
	case e.status != 0:
		return &Error{Status: http.StatusBadGateway, Err: e,
			Message: describeWorkerError(fmt.Sprintf("%s worker answered status %d", e.phase, e.status), e.body)}
	default:
		return &Error{Status: http.StatusBadGateway, Message: fmt.Sprintf("%s worker failed: %v", e.phase, e.err), Err: e}
	}
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// maxRelayedText bounds the part of a worker's non-JSON error body that
// reaches the client.
const maxRelayedText = 300

// relayedError is a worker's error as the client sees it: OpenAI's
// {"error":{"message","type","param","code"}} carrying the worker's
// message, type, param and code, with the worker's status. An integer code
// (vLLM, SGLang and TensorRT-LLM send the HTTP status) is kept as the worker
// sent it. It reads OpenAI's shape, vLLM's older flat
// {"object":"error","message",...}, FastAPI's {"detail": string or list}
// and a bare {"message"}; any other body (text/plain, HTML, empty) becomes
// a message naming the phase's worker and its status, with the body's
// first bytes.
func relayedError(phase string, status int, body []byte) *Error {
	return workerErrorBody(status, body, phase+" worker answered status "+strconv.Itoa(status))
}

// eventError is a gen worker's error event as the client sees it, in
// OpenAI's shape (see relayedError); the stream's status is already 200.
func eventError(data []byte) *Error {
	return workerErrorBody(http.StatusBadGateway, data, "generation worker sent an error event")
}

// workerErrorBody reads a worker's error body into an Error with status;
// without a message of its own, the message says what happened and quotes
// the body.
func workerErrorBody(status int, body []byte, what string) *Error {
	d := readWorkerError(status, body)
	if d.Message == "" {
		d.Message = withBody(what, "", body)
	}
	b, _ := json.Marshal(openai.ErrorBody{Error: d})
	return &Error{Status: status, Type: d.Type, Message: d.Message, Body: b}
}

// describeWorkerError is what happened followed by the worker's own message
// or, without one, the body's first bytes ("... with an empty body").
func describeWorkerError(what string, body []byte) string {
	return withBody(what, readWorkerError(0, body).Message, body)
}

// withBody is what followed by message, else by the body's first bytes.
func withBody(what, message string, body []byte) string {
	if message != "" {
		return what + ": " + message
	}
	if text := bytes.TrimSpace(body); len(text) > 0 {
		return what + ": " + string(truncate(text, maxRelayedText))
	}
	return what + " with an empty body"
}

// readWorkerError reads the error detail of a worker's body (message ""
// when it has none); the type defaults to status's.
func readWorkerError(status int, body []byte) openai.ErrorDetail {
	d := openai.ErrorDetail{Type: openai.TypeForStatus(status)}
	if openai.CheckDepth(body, openai.MaxWorkerDepth) != nil {
		return d
	}
	if v, err := fastjson.ParseBytes(body); err == nil && v.Type() == fastjson.TypeObject {
		readErrorObject(v, &d)
	}
	return d
}

// readErrorObject fills d from a worker's error object, leaving defaults
// where the worker says nothing.
func readErrorObject(v *fastjson.Value, d *openai.ErrorDetail) {
	obj := v
	if e := v.Get("error"); e != nil {
		switch e.Type() {
		case fastjson.TypeObject:
			obj = e
		case fastjson.TypeString:
			d.Message = string(e.GetStringBytes())
		}
	}
	if m := obj.GetStringBytes("message"); len(m) > 0 {
		d.Message = string(m)
	}
	if d.Message == "" {
		d.Message = detailMessage(v.Get("detail"))
	}
	if t := obj.GetStringBytes("type"); len(t) > 0 {
		d.Type = string(t)
	}
	if p := obj.Get("param"); p != nil && p.Type() == fastjson.TypeString {
		param := string(p.GetStringBytes())
		d.Param = &param
	}
	if c := obj.Get("code"); c != nil && (c.Type() == fastjson.TypeString || c.Type() == fastjson.TypeNumber) {
		d.Code = c.MarshalTo(nil)
	}
}

// detailMessage reads FastAPI's error detail: a string, or a list of
// {"loc":[...],"msg":"..."} validation errors joined as "loc: msg; ...".
func detailMessage(detail *fastjson.Value) string {
	if detail == nil {
		return ""
	}
	if detail.Type() == fastjson.TypeString {
		return string(detail.GetStringBytes())
	}
	var parts []string
	for _, item := range detail.GetArray() {
		msg := string(item.GetStringBytes("msg"))
		var loc []string
		for _, l := range item.GetArray("loc") {
			loc = append(loc, strings.Trim(string(l.MarshalTo(nil)), `"`))
		}
		if len(loc) > 0 {
			msg = strings.Join(loc, ".") + ": " + msg
		}
		parts = append(parts, msg)
	}
	return strings.Join(parts, "; ")
}

// errClientLeft ends a request whose client went away before its answer
// began; nobody reads it, the access log and metrics do.
var errClientLeft = &Error{Status: statusClientClosed, Message: "client closed the request", Err: errClientGone}
