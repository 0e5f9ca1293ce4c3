package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/duet-serve/duet/proto/openai"
)

// stream runs a streaming request on fasthttp's stream-writer goroutine:
// chunks as PROTOCOLS.md §4 describes, flushed once per batch of due
// tokens. A write error means the client is gone: the run ends and its
// blocks are released. It never panics out (that would kill the process).
func (s *Server) stream(w *bufio.Writer, r *run) {
	released := false
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic in stream writer", zap.Any("panic", p), zap.String("request_id", r.j.id))
			if !released {
				r.lease.finish(seqBlocks{})
			}
		}
	}()
	sink := newStreamSink(w, r.j, s.vocab, s.clock.now().Unix())
	var tokens tokenSink = sink
	if r.fault.garbage {
		tokens = &garbleSink{streamSink: sink, after: r.fault.dieAfter, html: r.fault.html, count: &s.metrics.faults[faultGarbage]}
	}
	res, err := s.decode(r, tokens, true)
	s.end(r, res.tokens)
	released = true
	s.logDone(r, len(res.tokens), res.finish, err)
	switch {
	case err == nil:
		err = sink.finish(res.finish, r.completedUsage(len(res.tokens)))
		if err == nil {
			s.metrics.request(r.j.phase, outcomeOK)
			return
		}
	case errors.Is(err, errDied):
		_ = w.Flush() // the tokens so far, then no [DONE]; the connection closes
		s.metrics.request(r.j.phase, outcomeServerError)
		return
	case errors.Is(err, errEngineFailed) || errors.Is(err, errKVPullFailed):
		_ = s.writeStreamFailure(sink, s.engineError(r.j, err))
		s.metrics.request(r.j.phase, outcomeServerError)
		return
	case errors.Is(err, errAborted):
		e := openai.NewError(err.Error(), openai.ErrTypeUnavailable, "", "")
		if openai.WriteEvent(w, e.JSON()) == nil && openai.WriteDone(w) == nil {
			_ = w.Flush()
		}
	}
	s.metrics.request(r.j.phase, outcomeAborted)
}

// streamSink writes token chunks. A token chunk is a fixed prefix, the
// token's JSON string and a fixed suffix; both are built once per request.
type streamSink struct {
	w       *bufio.Writer
	j       *job
	v       *vocab
	created int64
	prefix  []byte
	suffix  []byte
	begun   bool
	buf     []byte
}

func newStreamSink(w *bufio.Writer, j *job, v *vocab, created int64) *streamSink {
	k := &streamSink{w: w, j: j, v: v, created: created}
	head := `data: {"id":` + quote(j.id) + `,"object":`
	if j.kind == kindChat {
		head += `"` + openai.ObjectChatCompletionChunk + `"`
	} else {
		head += `"` + openai.ObjectTextCompletion + `"`
	}
	head += `,"created":` + strconv.FormatInt(created, 10) + `,"model":` + quote(j.model) + `,"choices":[{"index":0,`
	if j.kind == kindChat {
		k.prefix = []byte(head + `"delta":{"content":`)
		k.suffix = []byte(`},"finish_reason":null,"logprobs":null}]}` + "\n\n")
	} else {
		k.prefix = []byte(head + `"text":`)
		k.suffix = []byte(`,"finish_reason":null,"logprobs":null}]}` + "\n\n")
	}
	return k
}

// begin writes the chat role chunk before the first content.
func (k *streamSink) begin() error {
	if k.begun {
		return nil
	}
	k.begun = true
	if k.j.kind != kindChat {
		return nil
	}
	return k.event(openai.ChatChunk{ID: k.j.id, Object: openai.ObjectChatCompletionChunk, Created: k.created, Model: k.j.model,
		Choices: []openai.ChatChunkChoice{{Delta: openai.Delta{Role: "assistant", Content: openai.Ptr("")}}}})
}

func (k *streamSink) piece(id int, text string, whole bool) error {
	if err := k.begin(); err != nil || text == "" {
		return err
	}
	k.buf = append(k.buf[:0], k.prefix...)
	if whole && id >= 0 {
		k.buf = append(k.buf, k.v.quotedText(id)...)
	} else {
		k.buf = appendJSONString(k.buf, text)
	}
	k.buf = append(k.buf, k.suffix...)
	_, err := k.w.Write(k.buf)
	return err
}

func (k *streamSink) flush() error { return k.w.Flush() }

// finish writes the chunk with the finish reason, the usage chunk when
// asked for, and [DONE], then flushes.
func (k *streamSink) finish(reason string, u openai.Usage) error {
	if err := k.begin(); err != nil {
		return err
	}
	var last any
	if k.j.kind == kindChat {
		last = openai.ChatChunk{ID: k.j.id, Object: openai.ObjectChatCompletionChunk, Created: k.created, Model: k.j.model,
			Choices: []openai.ChatChunkChoice{{FinishReason: &reason}}}
	} else {
		last = openai.CompletionChunk{ID: k.j.id, Object: openai.ObjectTextCompletion, Created: k.created, Model: k.j.model,
			Choices: []openai.CompletionChoice{{FinishReason: &reason}}}
	}
	if err := k.event(last); err != nil {
		return err
	}
	if k.j.usage {
		var uc any
		if k.j.kind == kindChat {
			uc = openai.ChatChunk{ID: k.j.id, Object: openai.ObjectChatCompletionChunk, Created: k.created, Model: k.j.model,
				Choices: []openai.ChatChunkChoice{}, Usage: &u}
		} else {
			uc = openai.CompletionChunk{ID: k.j.id, Object: openai.ObjectTextCompletion, Created: k.created, Model: k.j.model,
				Choices: []openai.CompletionChoice{}, Usage: &u}
		}
		if err := k.event(uc); err != nil {
			return err
		}
	}
	if err := openai.WriteDone(k.w); err != nil {
		return err
	}
	return k.w.Flush()
}

func (k *streamSink) event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return openai.WriteEvent(k.w, b)
}

func quote(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 is left to
// encoding/json, which replaces it.
func appendJSONString(dst []byte, s string) []byte {
	if !utf8.ValidString(s) {
		return append(dst, quote(s)...)
	}
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
