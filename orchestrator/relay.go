package orchestrator

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/openai"
	"github.com/duet-serve/duet/router"
	"go.uber.org/zap"
)

// statusClientClosed is recorded for requests whose client went away
// (nginx's convention).
const statusClientClosed = 499

var (
	errClientGone    = errors.New("client disconnected")
	errStreamCut     = errors.New("generation worker ended the stream without [DONE] or a finish_reason")
	errStreamIdle    = errors.New("generation stream idle timeout")
	errStreamTooLong = errors.New("generation stream total timeout")
)

// sseEvent is one event read from the gen worker, or the read error that
// ended the stream.
type sseEvent struct {
	data []byte
	err  error
}

// relay moves one gen worker stream to the client. A reader goroutine reads
// events into a channel; the relay loop writes them, pings during silences
// and enforces idle and total limits. close(stop) plus closing the upstream
// stream ends the reader, which run and abort always join.
type relay struct {
	o     *Orchestrator
	req   *Request
	pair  *router.Pair
	st    *stream
	ctx   *protocol.Context
	t     *trace
	start time.Time

	events        chan sseEvent
	stop          chan struct{}
	joined        sync.WaitGroup
	first         sseEvent
	finished      bool  // a finish_reason was seen
	workerErr     error // the worker ended the stream with its own error event
	contentEvents int   // events with text: the output token count when usage is absent
	once          sync.Once
}

func newRelay(o *Orchestrator, req *Request, pair *router.Pair, st *stream, c *protocol.Context, t *trace, start time.Time) *relay {
	rl := &relay{o: o, req: req, pair: pair, st: st, ctx: c, t: t, start: start,
		events: make(chan sseEvent, 16), stop: make(chan struct{})}
	rl.joined.Add(1)
	go rl.read()
	return rl
}

func (rl *relay) read() {
	defer rl.joined.Done()
	sr := openai.NewSSEReader(rl.st.body, 0)
	for {
		data, err := sr.Next()
		ev := sseEvent{err: err}
		if err == nil {
			ev.data = append([]byte(nil), data...)
		}
		select {
		case rl.events <- ev:
		case <-rl.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// awaitFirst waits until firstBy for the first event, so that a worker that
// fails before sending anything can still be retried elsewhere.
func (rl *relay) awaitFirst(firstBy time.Time) error {
	timer := time.NewTimer(firstBy.Sub(rl.o.now()))
	defer timer.Stop()
	select {
	case ev := <-rl.events:
		switch {
		case ev.err != nil:
			return fmt.Errorf("stream ended before its first event: %w", ev.err)
		case openai.IsDone(ev.data):
			return fmt.Errorf("%w: [DONE] before any content", errStreamCut)
		case isErrorEvent(ev.data):
			return fmt.Errorf("worker error event: %s", truncate(ev.data, 300))
		}
		rl.first = ev
		return nil
	case <-timer.C:
		return fmt.Errorf("%w: no event within %s", errTimeout, rl.o.cfg.FirstEventTimeout)
	}
}

// abort ends the upstream stream, joins the reader, then releases the
// response. Idempotent.
func (rl *relay) abort() {
	rl.once.Do(func() {
		close(rl.stop)
		rl.st.closeBody()
		rl.joined.Wait()
		rl.st.close()
	})
}

// record releases the leases and logs the request once.
func (rl *relay) record(status int, err error) {
	rl.pair.Release()
	rl.t.genRan = status == http.StatusOK // the gen worker now holds prompt and output
	if rl.t.outputTokens == 0 {
		rl.t.outputTokens = rl.contentEvents
	}
	rl.t.status, rl.t.err = status, err
	rl.o.metrics.phase.WithLabelValues(phaseGeneration).Observe(rl.o.now().Sub(rl.start).Seconds())
	rl.o.finish(rl.t)
}

// run relays until the stream ends; see Response.Relay. It runs on
// fasthttp's stream writer after the handler returned, where a panic would
// take the process down: a panic is recovered, logged and the request
// recorded as failed, with everything released.
func (rl *relay) run(w *bufio.Writer) {
	status, err := http.StatusInternalServerError, error(nil)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in relay: %v", p)
			rl.o.log.Error("panic in relay", zap.String("request_id", rl.req.ID), zap.Any("panic", p))
		}
		rl.abort()
		rl.record(status, err)
	}()
	status, err = rl.loop(w)
}

func (rl *relay) loop(w *bufio.Writer) (int, error) {
	if err := rl.forward(w, rl.first.data); err != nil {
		return statusClientClosed, errClientGone
	}
	ping := time.NewTicker(rl.o.cfg.PingInterval)
	defer ping.Stop()
	idle := time.NewTimer(rl.o.cfg.StreamIdleTimeout)
	defer idle.Stop()
	total := time.NewTimer(rl.o.cfg.StreamTotalTimeout)
	defer total.Stop()
	lastWrite := rl.o.now()
	total.Reset(rl.o.cfg.StreamTotalTimeout - lastWrite.Sub(rl.start))
	for {
		select {
		case ev := <-rl.events:
			if ev.err != nil || openai.IsDone(ev.data) {
				return rl.end(w, ev.err)
			}
			if err := rl.forward(w, ev.data); err != nil {
				return statusClientClosed, errClientGone
			}
			lastWrite = rl.o.now()
			idle.Reset(rl.o.cfg.StreamIdleTimeout)
		case <-ping.C:
			if rl.o.now().Sub(lastWrite) < rl.o.cfg.PingInterval {
				continue
			}
			if openai.WriteComment(w, "ping") != nil || w.Flush() != nil {
				return statusClientClosed, errClientGone
			}
			lastWrite = rl.o.now()
		case <-idle.C:
			return rl.failStream(w, errStreamIdle)
		case <-total.C:
			return rl.failStream(w, errStreamTooLong)
		}
	}
}

// end closes a stream whose upstream ended: cleanly after [DONE] or a
// finish_reason, as a worker failure otherwise.
func (rl *relay) end(w *bufio.Writer, readErr error) (int, error) {
	if rl.workerErr != nil { // relayed as is; the request failed
		_ = openai.WriteDone(w)
		_ = w.Flush()
		return http.StatusBadGateway, rl.workerErr
	}
	if !rl.finished {
		if readErr == nil || errors.Is(readErr, io.EOF) {
			readErr = errStreamCut
		}
		return rl.failStream(w, readErr)
	}
	if openai.WriteDone(w) != nil || w.Flush() != nil {
		return statusClientClosed, errClientGone
	}
	return http.StatusOK, nil
}

// failStream tells the client the stream failed after it began: an error
// event, then [DONE].
func (rl *relay) failStream(w *bufio.Writer, err error) (int, error) {
	status := http.StatusBadGateway
	if errors.Is(err, errStreamIdle) || errors.Is(err, errStreamTooLong) {
		status = http.StatusGatewayTimeout
	}
	body := openai.NewError(err.Error(), openai.TypeForStatus(status), "", "").JSON()
	_ = openai.WriteEvent(w, body)
	_ = openai.WriteDone(w)
	_ = w.Flush()
	return status, err
}

// forward writes one worker event to the client, patching the usage chunk
// and noting the first content and the finish reason.
func (rl *relay) forward(w *bufio.Writer, data []byte) error {
	if bytes.Contains(data, []byte(`"finish_reason":"`)) {
		rl.finished = true
	}
	if isErrorEvent(data) {
		rl.workerErr = fmt.Errorf("generation worker error event: %s", truncate(data, 300))
	}
	if bytes.Contains(data, []byte(`"usage":{`)) {
		var u openai.Usage
		data, u = patchResponseUsage(data, rl.ctx)
		rl.t.cachedTokens, rl.t.outputTokens = u.CachedTokens(), u.CompletionTokens
	}
	if hasContent(data) {
		if rl.t.ttft == 0 {
			rl.t.ttft = rl.o.now().Sub(rl.t.start)
		}
		rl.contentEvents++
	}
	rl.t.events++
	rl.t.bytes += len(data)
	if err := openai.WriteEvent(w, data); err != nil {
		return err
	}
	return w.Flush()
}

func isErrorEvent(data []byte) bool {
	return bytes.HasPrefix(bytes.TrimSpace(data), []byte(`{"error"`))
}

// hasContent reports whether a chunk carries non-empty text: a non-empty
// "content" (chat) or "text" (completions) string.
func hasContent(data []byte) bool {
	for _, key := range [][]byte{[]byte(`"content":"`), []byte(`"text":"`)} {
		if i := bytes.Index(data, key); i >= 0 && i+len(key) < len(data) && data[i+len(key)] != '"' {
			return true
		}
	}
	return false
}
