package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
)

// pipeTransport serves requests in memory with h, the way a connection to
// a server would: it reads the request body and reports WroteRequest, it
// returns once h has sent its header (reporting GotFirstResponseByte), the
// body streams through an io.Pipe as h writes it, and h's request context
// ends when the client's does or when the client closes the body, as a
// server sees a closed connection; a cancelled request's body read fails
// with the context's error. With no sockets, a run over it can be simulated
// in a synctest bubble.
type pipeTransport struct{ h http.Handler }

var _ http.RoundTripper = pipeTransport{}

func (p pipeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("pipe transport: request body: %w", err)
		}
		body = b
	}
	trace := httptrace.ContextClientTrace(req.Context())
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{})
	}
	ctx, cancel := context.WithCancel(req.Context())
	sreq := req.Clone(ctx)
	sreq.Body = io.NopCloser(bytes.NewReader(body))
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, body: pw, sent: make(chan struct{})}
	stopWatch := context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	go func() {
		defer stopWatch()
		p.h.ServeHTTP(w, sreq)
		w.WriteHeader(http.StatusOK) // no-op when sent
		pw.CloseWithError(ctx.Err()) // EOF, or the cancel as the watch reports it
	}()
	select {
	case <-w.sent:
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}
	return &http.Response{Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: w.sentHeader, ContentLength: -1,
		Body: &pipeBody{PipeReader: pr, cancel: cancel}, Request: req}, nil
}

// pipeResponse is the handler's side: an unbuffered http.ResponseWriter
// and http.Flusher.
type pipeResponse struct {
	header http.Header
	body   *io.PipeWriter
	sent   chan struct{} // closed once the header is sent

	once       sync.Once
	status     int         // set once, before sent is closed
	sentHeader http.Header // the header as sent
}

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(status int) {
	w.once.Do(func() {
		w.status, w.sentHeader = status, w.header.Clone()
		close(w.sent)
	})
}

func (w *pipeResponse) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// Flush sends the header; the body is never buffered.
func (w *pipeResponse) Flush() { w.WriteHeader(http.StatusOK) }

// pipeBody is the client's side; closing it ends the handler's context.
type pipeBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b *pipeBody) Close() error {
	b.cancel()
	return b.PipeReader.Close()
}
