package frontend

import (
	"bufio"
	"errors"
	"io"
	"sync"

	"github.com/duet-serve/duet/orchestrator"
)

// eventStream is the body of a streamed answer to an HTTP/1.1 client.
// fasthttp writes it by calling WriteTo on the connection's own goroutine,
// wrapping w so that every write is one chunk followed by a flush of the
// connection: the relay writes straight to the socket, one write per
// flush. fasthttp's SetBodyStreamWriter would instead run the relay on a
// goroutine of its own and pass every event through an in-memory pipe to
// the connection's goroutine, two goroutine hand-offs per event
// (fasthttp v1.74.0 http.go writeBodyChunked, streaming.go
// NewStreamReader).
//
// The answer is ended exactly once: by WriteTo after the relay, or by
// Close when fasthttp drops the body unwritten (a HEAD request, a
// connection that failed first). stopWatch runs after either.
type eventStream struct {
	resp      *orchestrator.Response
	stopWatch func()
	once      sync.Once
}

// streamBufferBytes is the buffer events are gathered in before a flush:
// an event larger than it goes out as more than one chunk.
const streamBufferBytes = 8 << 10

var streamWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, streamBufferBytes) }}

// errReadStream is returned by Read, which fasthttp does not call on a
// body that supports WriteTo.
var errReadStream = errors.New("frontend: an event stream is written with WriteTo, not read")

// SupportsBodyWriteTo tells fasthttp to call WriteTo (fasthttp.BodyWriterTo).
func (s *eventStream) SupportsBodyWriteTo() bool { return true }

// WriteTo relays the events to w. It reports no error of its own: a failed
// write ends the relay, and fasthttp finds the broken connection itself.
func (s *eventStream) WriteTo(w io.Writer) (int64, error) {
	s.once.Do(func() {
		defer s.stopWatch()
		bw := streamWriters.Get().(*bufio.Writer)
		bw.Reset(w)
		defer func() {
			bw.Reset(nil)
			streamWriters.Put(bw)
		}()
		s.resp.Relay(bw)
	})
	return 0, nil
}

func (s *eventStream) Read([]byte) (int, error) { return 0, errReadStream }

// Close ends the answer if WriteTo never ran.
func (s *eventStream) Close() error {
	s.once.Do(func() {
		defer s.stopWatch()
		s.resp.Close()
	})
	return nil
}
