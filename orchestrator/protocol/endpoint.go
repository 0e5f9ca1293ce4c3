package protocol

import "strconv"

// Endpoint is the OpenAI route a client called. The same route is called on
// the workers. The zero value is invalid, so an Input whose Endpoint was not
// set fails validation instead of being taken for a chat request.
type Endpoint int

// The routes duet serves.
const (
	// EndpointChat is POST /v1/chat/completions.
	EndpointChat Endpoint = iota + 1
	// EndpointCompletions is POST /v1/completions.
	EndpointCompletions
)

// Valid reports whether e is one of the declared endpoints.
func (e Endpoint) Valid() bool { return e == EndpointChat || e == EndpointCompletions }

// Path returns the HTTP path of the endpoint on the frontend and on workers,
// or "" for an invalid endpoint.
func (e Endpoint) Path() string {
	switch e {
	case EndpointChat:
		return "/v1/chat/completions"
	case EndpointCompletions:
		return "/v1/completions"
	}
	return ""
}

// String returns "chat" or "completions", or "Endpoint(n)" when e is invalid.
func (e Endpoint) String() string {
	switch e {
	case EndpointChat:
		return "chat"
	case EndpointCompletions:
		return "completions"
	}
	return "Endpoint(" + strconv.Itoa(int(e)) + ")"
}
