package openai

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// SSE framing as OpenAI servers use it: every event is one "data: <json>"
// line followed by a blank line, and the stream ends with "data: [DONE]".

// ContentTypeSSE is the Content-Type of a streaming response.
const ContentTypeSSE = "text/event-stream"

var (
	dataPrefix  = []byte("data:")
	eventPrefix = []byte("data: ")
	eventEnd    = []byte("\n\n")
	doneData    = []byte("[DONE]")
)

// IsDone reports whether an event's data is the terminating [DONE] marker
// (surrounding whitespace allowed).
func IsDone(data []byte) bool { return bytes.Equal(bytes.TrimSpace(data), doneData) }

// WriteEvent writes one data event. The caller flushes.
func WriteEvent(w io.Writer, data []byte) error {
	if _, err := w.Write(eventPrefix); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	_, err := w.Write(eventEnd)
	return err
}

// WriteDone writes the terminating "data: [DONE]" event.
func WriteDone(w io.Writer) error { return WriteEvent(w, doneData) }

// WriteComment writes an SSE comment line (": text"), which clients ignore;
// it is used as a keep-alive ping.
func WriteComment(w io.Writer, text string) error {
	_, err := io.WriteString(w, ": "+text+"\n\n")
	return err
}

// ErrEventTooLarge is returned by SSEReader.Next for an event over the
// reader's size limit.
var ErrEventTooLarge = errors.New("sse: event larger than limit")

// SSEReader reads the data payloads of an SSE stream. It is not safe for
// concurrent use.
type SSEReader struct {
	r     *bufio.Reader
	limit int
	buf   []byte
}

// NewSSEReader reads events from r; an event's data may be at most limit
// bytes (limit <= 0 means 1 MiB).
func NewSSEReader(r io.Reader, limit int) *SSEReader {
	if limit <= 0 {
		limit = 1 << 20
	}
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 16<<10)
	}
	return &SSEReader{r: br, limit: limit}
}

// Next returns the data of the next event, skipping comments and other
// fields; several data lines of one event are joined with "\n". The slice is
// valid until the next call. At the end of the stream it returns io.EOF,
// also when the stream stopped in the middle of an event (a truncated stream
// must be judged by its content: see IsDone).
func (s *SSEReader) Next() ([]byte, error) {
	s.buf = s.buf[:0]
	have := false
	for {
		line, err := s.readLine()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			if have {
				return s.buf, nil
			}
			continue
		}
		if !bytes.HasPrefix(line, dataPrefix) {
			continue // comment or a field duet does not use
		}
		payload := bytes.TrimPrefix(line[len(dataPrefix):], []byte(" "))
		if have {
			s.buf = append(s.buf, '\n')
		}
		if len(s.buf)+len(payload) > s.limit {
			return nil, ErrEventTooLarge
		}
		s.buf = append(s.buf, payload...)
		have = true
	}
}

// readLine returns one line without its line ending.
func (s *SSEReader) readLine() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		rest := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(rest) > s.limit {
				return nil, ErrEventTooLarge
			}
			line, err = s.r.ReadSlice('\n')
			rest = append(rest, line...)
		}
		line = rest
	}
	if err != nil && (err != io.EOF || len(line) == 0) {
		return nil, err
	}
	if err == io.EOF {
		return nil, io.EOF // a line cut before its newline is incomplete
	}
	return bytes.TrimRight(line, "\r\n"), nil
}
