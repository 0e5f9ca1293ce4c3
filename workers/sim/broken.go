package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/duet-serve/duet/proto/openai"
)

// The garbage, cut and stall faults: a worker that answers what no engine
// should, or breaks its connection where no clean end is possible.

// htmlPage is the garbage a proxy in front of a worker answers with.
const htmlPage = "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>\n"

// brokenAnswer answers a non-streaming request (or a context leg) with its
// fault, before any admission: garbage is a 200 whose body is an HTML page
// (text/html) or truncated JSON; cut sends the headers and half of a JSON
// body, then closes the connection; stall sends the headers and then
// nothing until the client leaves or hangMax passes.
func (s *Server) brokenAnswer(ctx *fasthttp.RequestCtx, j *job, f faultDraw) {
	finish := openai.FinishLength
	body, _ := json.Marshal(s.response(j, "broken", finish, openai.Usage{}, extras{})) // plain types, cannot fail
	if f.garbage {
		s.metrics.faults[faultGarbage].Add(1)
		if f.html {
			ctx.SetContentType("text/html; charset=utf-8")
			ctx.SetBodyString(htmlPage)
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(body[:len(body)/2])
		return
	}
	var h fasthttp.ResponseHeader
	h.SetStatusCode(http.StatusOK)
	h.SetContentType("application/json")
	h.SetContentLength(len(body))
	head := responseHead(ctx, &h)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		s.hijacked.Add(1)
		defer s.hijacked.Add(-1)
		if f.cut {
			s.metrics.faults[faultCut].Add(1)
			_, _ = c.Write(append(head, body[:len(body)/2]...))
			return // fasthttp closes the connection
		}
		s.metrics.faults[faultStall].Add(1)
		if _, err := c.Write(head); err == nil {
			s.holdConn(c, f.hangMax)
		}
	})
}

// responseHead returns h's bytes (status line and headers) with the
// request's X-Request-Id echoed, copied so that they outlive ctx.
func responseHead(ctx *fasthttp.RequestCtx, h *fasthttp.ResponseHeader) []byte {
	if id := ctx.Request.Header.Peek("X-Request-Id"); len(id) > 0 {
		h.SetBytesV("X-Request-Id", id)
	}
	return append([]byte(nil), h.Header()...)
}

// brokenStream serves a stream that a cut or stall breaks after
// dieAfter tokens. fasthttp's stream writer always ends its chunked body
// cleanly, so the connection is hijacked and the whole exchange, admission
// included, runs on it: the headers, then the events in HTTP chunks, then
// half of an event in half of a chunk before the connection closes (cut),
// or silence until the client leaves or hangMax passes (stall). A stream
// that ends before its fault ends cleanly.
func (s *Server) brokenStream(ctx *fasthttp.RequestCtx, j *job, arrival time.Time, f faultDraw) {
	requestID := append([]byte(nil), ctx.Request.Header.Peek("X-Request-Id")...)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		s.hijacked.Add(1)
		defer s.hijacked.Add(-1)
		var h fasthttp.ResponseHeader
		if len(requestID) > 0 {
			h.SetBytesV("X-Request-Id", requestID)
		}
		r, herr := s.start(j, arrival, f)
		if herr != nil {
			s.metrics.request(j.phase, outcomeFor(herr.status))
			body := herr.body()
			h.SetStatusCode(herr.status)
			h.SetContentType("application/json")
			h.SetContentLength(len(body))
			_, _ = c.Write(append(h.Header(), body...))
			return
		}
		h.SetStatusCode(http.StatusOK)
		h.SetContentType(openai.ContentTypeSSE)
		h.Set("Cache-Control", "no-cache")
		h.SetContentLength(-1) // chunked
		setRunHeaders(&h, r)
		s.breakStream(c, h.Header(), r)
	})
}

// breakStream writes head and r's stream on c until r's fault; see
// brokenStream. It ends r's lease on every path.
func (s *Server) breakStream(c net.Conn, head []byte, r *run) {
	ended := false
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic in broken stream", zap.Any("panic", p), zap.String("request_id", r.j.id))
			if !ended {
				r.lease.finish(seqBlocks{})
			}
		}
	}()
	if _, err := c.Write(head); err != nil {
		ended = true
		r.lease.finish(seqBlocks{})
		s.metrics.request(r.j.phase, outcomeAborted)
		return
	}
	w := bufio.NewWriter(&chunkWriter{c: c})
	sink := newStreamSink(w, r.j, s.vocab, s.clock.now().Unix())
	res, err := s.decode(r, sink, true)
	s.end(r, res.tokens)
	ended = true
	s.logDone(r, len(res.tokens), res.finish, err)
	switch {
	case err == nil: // shorter than the fault's point: a clean end
		if sink.finish(res.finish, r.completedUsage(len(res.tokens))) == nil {
			_, _ = c.Write([]byte("0\r\n\r\n"))
			s.metrics.request(r.j.phase, outcomeOK)
			return
		}
		s.metrics.request(r.j.phase, outcomeAborted)
		return
	case !errors.Is(err, errBroken) || w.Flush() != nil:
		s.metrics.request(r.j.phase, outcomeAborted)
		return
	}
	s.metrics.request(r.j.phase, outcomeServerError)
	if r.fault.cut {
		s.metrics.faults[faultCut].Add(1)
		ev := sink.tokenEvent(" cut")
		half := strconv.AppendInt(nil, int64(len(ev)), 16)
		half = append(append(half, "\r\n"...), ev[:len(ev)/2]...)
		_, _ = c.Write(half)
		return // fasthttp closes the connection
	}
	s.metrics.faults[faultStall].Add(1)
	s.holdConn(c, r.fault.hangMax)
}

// chunkWriter writes each Write as one HTTP/1.1 chunk on a hijacked
// connection.
type chunkWriter struct {
	c   net.Conn
	buf []byte
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	w.buf = strconv.AppendInt(w.buf[:0], int64(len(p)), 16)
	w.buf = append(append(append(w.buf, "\r\n"...), p...), "\r\n"...)
	if _, err := w.c.Write(w.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// tokenEvent returns the whole SSE event of one content token.
func (k *streamSink) tokenEvent(text string) []byte {
	ev := append([]byte(nil), k.prefix...)
	ev = appendJSONString(ev, text)
	return append(ev, k.suffix...)
}

// garbleSink passes a stream through and, before the token that follows
// the first after tokens, writes one event whose data is not JSON: an HTML
// page or a truncated chunk (the garbage fault).
type garbleSink struct {
	*streamSink
	after int
	html  bool
	count *atomic.Uint64 // the garbage faults injected
	n     int
	done  bool
}

func (g *garbleSink) piece(id int, text string, whole bool) error {
	if !g.done && g.n >= g.after {
		g.done = true
		g.count.Add(1)
		if err := g.begin(); err != nil {
			return err
		}
		data := []byte(htmlPage[:len(htmlPage)-1])
		if !g.html {
			ev := g.tokenEvent(" garbage")
			data = ev[len("data: ") : len(ev)/2]
		}
		if err := openai.WriteEvent(g.w, data); err != nil {
			return err
		}
	}
	g.n++
	return g.streamSink.piece(id, text, whole)
}
