package openai

import (
	"encoding/json"
	"net/http"
)

// Error types as OpenAI names them.
const (
	ErrTypeInvalidRequest = "invalid_request_error"
	ErrTypeNotFound       = "not_found_error"
	ErrTypeRateLimit      = "rate_limit_error"
	ErrTypeServer         = "server_error"
	ErrTypeUnavailable    = "service_unavailable_error"
	ErrTypeTimeout        = "timeout_error"
)

// ErrorBody is the body of every error response:
// {"error":{"message","type","param","code"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inner object of ErrorBody.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	// Code is OpenAI's error code, a JSON string or null. Engines also send
	// an integer (the HTTP status: vLLM, SGLang, TensorRT-LLM), so it is
	// kept as the raw JSON value the producer wrote; nil encodes as null.
	Code json.RawMessage `json:"code"`
}

// NewError builds an error body; param and code may be empty (sent as null).
func NewError(message, typ, param, code string) ErrorBody {
	e := ErrorBody{Error: ErrorDetail{Message: message, Type: typ}}
	if param != "" {
		e.Error.Param = &param
	}
	if code != "" {
		e.Error.Code, _ = json.Marshal(code)
	}
	return e
}

// JSON encodes the error body. It cannot fail: a Code that is not valid
// JSON is written as null.
func (e ErrorBody) JSON() []byte {
	if len(e.Error.Code) > 0 && !json.Valid(e.Error.Code) {
		e.Error.Code = nil
	}
	b, _ := json.Marshal(e)
	return b
}

// TypeForStatus returns the conventional error type for an HTTP status.
func TypeForStatus(status int) string {
	switch {
	case status == http.StatusNotFound:
		return ErrTypeNotFound
	case status == http.StatusTooManyRequests:
		return ErrTypeRateLimit
	case status == http.StatusServiceUnavailable:
		return ErrTypeUnavailable
	case status == http.StatusGatewayTimeout:
		return ErrTypeTimeout
	case status >= 500:
		return ErrTypeServer
	default:
		return ErrTypeInvalidRequest
	}
}
