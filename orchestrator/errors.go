package orchestrator

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/duet-serve/duet/proto/openai"
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

func (e *workerError) Error() string {
	switch {
	case e.status != 0:
		return fmt.Sprintf("%s phase on %s: status %d: %s", e.phase, e.worker, e.status, truncate(e.body, 200))
	default:
		return fmt.Sprintf("%s phase on %s: %v", e.phase, e.worker, e.err)
	}
}

func (e *workerError) Unwrap() error { return e.err }

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
		return &Error{Status: e.status, Body: openaiErrorOrNil(e.body), Message: string(truncate(e.body, 500)), Err: e}
	default:
		return &Error{Status: http.StatusBadGateway, Message: fmt.Sprintf("%s worker failed: %s", e.phase, e.shortReason()), Err: e}
	}
}

func (e *workerError) shortReason() string {
	if e.status != 0 {
		return fmt.Sprintf("status %d", e.status)
	}
	if e.err != nil {
		return e.err.Error()
	}
	return "unknown error"
}

// openaiErrorOrNil returns body when it is an OpenAI error body, else nil
// (the Error then builds one from its message).
func openaiErrorOrNil(body []byte) []byte {
	var probe openai.ErrorBody
	if err := jsonUnmarshal(body, &probe); err != nil || probe.Error.Message == "" {
		return nil
	}
	return append([]byte(nil), body...)
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
