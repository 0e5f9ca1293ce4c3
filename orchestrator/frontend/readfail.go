package frontend

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/duet-serve/duet/orchestrator"
	"github.com/valyala/fasthttp"
)

// readFailure is fasthttp's ErrorHandler: it answers a request fasthttp
// could not read (headers over max_header_bytes, a body over
// max_body_bytes, a request not received within read_timeout, a malformed
// request) as every other error is answered, with an OpenAI error body and
// an X-Request-ID, instead of fasthttp's plain text. fasthttp closes the
// connection after it.
func (s *Server) readFailure(ctx *fasthttp.RequestCtx, err error) {
	ctx.Response.Header.Set(headerRequestID, requestID(ctx))
	writeError(ctx, s.readError(err))
}

// readError classifies an error reading a request.
func (s *Server) readError(err error) *orchestrator.Error {
	var small *fasthttp.ErrSmallBuffer
	var timeout interface{ Timeout() bool } // net.Error and fasthttputil's pipes
	switch {
	case errors.As(err, &small):
		return &orchestrator.Error{Status: http.StatusRequestHeaderFieldsTooLarge,
			Message: fmt.Sprintf("request headers larger than %d bytes", s.opts.Config.MaxHeaderBytes)}
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return &orchestrator.Error{Status: http.StatusRequestEntityTooLarge,
			Message: fmt.Sprintf("request body larger than %d bytes", s.opts.Config.MaxBodyBytes)}
	case errors.As(err, &timeout) && timeout.Timeout():
		return &orchestrator.Error{Status: http.StatusRequestTimeout,
			Message: fmt.Sprintf("request not received within %s (server.read_timeout)", s.opts.Config.ReadTimeout)}
	}
	return &orchestrator.Error{Status: http.StatusBadRequest, Message: "malformed HTTP request"}
}
