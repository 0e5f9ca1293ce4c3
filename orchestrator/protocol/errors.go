package protocol

import "errors"

// ErrBadInput is wrapped by every error caused by an Input or a Context the
// adapter cannot use (missing or out-of-range fields, a body that is not a
// JSON object, a generation request for a Finished context). The client's
// body was validated before, so this is a bug in the caller: a 500, not a
// 4xx, and not retried.
var ErrBadInput = errors.New("invalid adapter input")

// ErrBadContextResponse is wrapped by every ContextResponseError: a ctx
// worker answered 2xx with a body that breaks the protocol. Treat it like a
// ctx worker failure (retry on another ctx worker with a new attempt).
var ErrBadContextResponse = errors.New("bad context response")

// ContextResponseError says why a ctx response was rejected. errors.Is
// matches ErrBadContextResponse and Err.
type ContextResponseError struct {
	// Adapter is the adapter's Name.
	Adapter string
	// Reason says what is wrong, e.g. "2 choices, want 1".
	Reason string
	// Err is the underlying error (a JSON syntax error), or nil.
	Err error
}

// Error returns "<adapter>: bad context response: <reason>[: <err>]".
func (e *ContextResponseError) Error() string {
	s := e.Adapter + ": " + ErrBadContextResponse.Error() + ": " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrBadContextResponse and, when set, Err.
func (e *ContextResponseError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrBadContextResponse}
	}
	return []error{ErrBadContextResponse, e.Err}
}
