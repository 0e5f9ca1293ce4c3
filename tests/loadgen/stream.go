package loadgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/duet-serve/duet/proto/openai"
)

// Error types recorded by the client (ErrorDetails.Type). A non-2xx answer
// uses the type of the server's OpenAI error body, or HTTPError.
const (
	ErrConnection    = "ConnectionError"
	ErrTimeout       = "TimeoutError"
	ErrCancelled     = "RequestCancellationError"
	ErrRead          = "ReadError"
	ErrTruncated     = "TruncatedStream"
	ErrInStream      = "InStreamError"
	ErrInvalid       = "InvalidResponse"
	ErrEmptyResponse = "EmptyResponse"
)

// ErrorDetails is a failed request's error as aiperf exports it: the HTTP
// status when there was one, a type and a message.
type ErrorDetails struct {
	Code    *int   `json:"code,omitempty"`
	Type    string `json:"type,omitempty"`
	Message string `json:"message"`
}

func newError(typ, format string, a ...any) *ErrorDetails {
	return &ErrorDetails{Type: typ, Message: fmt.Sprintf(format, a...)}
}

// exchange is what one request produced, as the client observed it. Times
// are zero when the event did not happen.
type exchange struct {
	start time.Time // request written (or attempted, when it never was)
	ack   time.Time // response headers received
	end   time.Time // last byte of the response read
	// first, second and last are the arrivals of the first, second and
	// last chunks with non-empty content; chunks counts those chunks.
	first, second, last time.Time
	chunks              int
	text                strings.Builder // the reply's content
	usage               *openai.Usage
	finish              string // last finish_reason seen
	done                bool   // [DONE] seen
	err                 *ErrorDetails
	cancelled           bool
}

// chunkBody is the part of a streamed chat or completion chunk the client
// reads.
type chunkBody struct {
	Choices []struct {
		Delta struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
		} `json:"delta"`
		Message *struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
		} `json:"message"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *openai.Usage   `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// content returns the answer text in a chunk and whether it carries any
// output at all (reasoning tokens count for timing, as in aiperf, but are
// not part of the reply resent on the next turn).
func (c *chunkBody) content() (text string, any bool) {
	var b strings.Builder
	for _, ch := range c.Choices {
		d := ch.Delta
		if ch.Message != nil {
			d.Content, d.ReasoningContent = ch.Message.Content, ch.Message.ReasoningContent
		}
		for _, s := range []*string{d.Content, ch.Text} {
			if s != nil && *s != "" {
				b.WriteString(*s)
				any = true
			}
		}
		if d.ReasoningContent != nil && *d.ReasoningContent != "" {
			any = true
		}
	}
	return b.String(), any
}

func (c *chunkBody) finishReason() string {
	for _, ch := range c.Choices {
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			return *ch.FinishReason
		}
	}
	return ""
}

// readStream reads an SSE response body into ex, stamping every chunk with
// now(). It stops at [DONE], at an in-stream error event, or at the end of
// the body; a body that ends with neither [DONE] nor a finish_reason is a
// truncated stream. readErr classifies a failed read (timeout, cancel).
func readStream(r io.Reader, now func() time.Time, ex *exchange, readErr func(error) *ErrorDetails) {
	sse := openai.NewSSEReader(r, 16<<20)
	for {
		data, err := sse.Next()
		if err != nil {
			ex.end = now()
			switch {
			case errors.Is(err, io.EOF):
				if !ex.done && ex.finish == "" {
					ex.err = newError(ErrTruncated, "stream ended without [DONE] or a finish_reason after %d content chunks", ex.chunks)
				}
			default:
				ex.err = readErr(err)
			}
			return
		}
		t := now()
		if openai.IsDone(data) {
			ex.done, ex.end = true, t
			return
		}
		var c chunkBody
		if err := json.Unmarshal(data, &c); err != nil {
			ex.end, ex.err = t, newError(ErrInvalid, "undecodable stream chunk: %v", err)
			return
		}
		if isErrorValue(c.Error) {
			ex.end, ex.err = t, inStreamError(c.Error)
			return
		}
		ex.observe(&c, t)
	}
}

// observe takes in one decoded chunk (or a whole non-streaming body)
// received at t.
func (ex *exchange) observe(c *chunkBody, t time.Time) {
	if text, any := c.content(); any {
		switch ex.chunks {
		case 0:
			ex.first = t
		case 1:
			ex.second = t
		}
		ex.chunks++
		ex.last = t
		ex.text.WriteString(text)
	}
	if f := c.finishReason(); f != "" {
		ex.finish = f
	}
	if c.Usage != nil {
		ex.usage = c.Usage
	}
}

// readBody reads a non-streaming JSON response into ex.
func readBody(r io.Reader, now func() time.Time, ex *exchange, readErr func(error) *ErrorDetails) {
	b, err := io.ReadAll(r)
	ex.end = now()
	if err != nil {
		ex.err = readErr(err)
		return
	}
	var c chunkBody
	if err := json.Unmarshal(b, &c); err != nil {
		ex.err = newError(ErrInvalid, "undecodable response body: %v", err)
		return
	}
	if isErrorValue(c.Error) {
		ex.err = inStreamError(c.Error)
		return
	}
	ex.observe(&c, ex.end)
	ex.done = true
}

func isErrorValue(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

// inStreamError describes an error event ({"error": {...}}) sent after the
// stream began.
func inStreamError(raw json.RawMessage) *ErrorDetails {
	var d openai.ErrorDetail
	if json.Unmarshal(raw, &d) != nil || (d.Type == "" && d.Message == "") {
		return newError(ErrInStream, "%s", truncate(string(raw), 200))
	}
	return newError(ErrInStream, "%s: %s", d.Type, d.Message)
}

// statusError describes a non-2xx answer as aiperf 0.12 does
// (transports/aiohttp_client.py): the status as the code, the HTTP reason
// phrase as the type, the body as the message (at most 4 KiB here).
func statusError(status int, body []byte) *ErrorDetails {
	return &ErrorDetails{Code: &status, Type: http.StatusText(status), Message: truncate(strings.TrimSpace(string(body)), 4096)}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
