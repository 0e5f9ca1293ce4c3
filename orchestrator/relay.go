package orchestrator

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/openai"
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

// relay moves a generation to the client: one gen worker stream (a leg),
// or, when a worker fails mid-stream and the answer is migrated, one leg
// after another (see migrate.go). The relay loop writes each leg's events,
// pings during silences and enforces idle and total limits.
type relay struct {
	f     *flight
	leg   *leg              // the stream being relayed
	ctx   *protocol.Context // the first leg's context phase result; nil when none
	lim   streamLimits
	start time.Time // the generation phase's

	first         sseEvent
	firstChunk    chunk // first, as awaitFirst read it
	finished      bool  // a finish_reason was seen
	workerErr     error // the worker ended the stream with its own error event
	contentEvents int   // events with text: the output token count when usage is absent
	chunks        *chunkReader
	// answer is what the client got so far, kept to continue it on another
	// worker (it points to ans); nil when the request cannot be migrated.
	answer *answer
	ans    answer
	// firstLeg is the first stream's leg, which leg points to until a
	// migration.
	firstLeg leg
	// withheld is a worker's error event not yet relayed because the
	// answer might be migrated; halt relays it when it is not.
	withheld []byte
	once     sync.Once
}

// leg is one gen worker stream: a reader goroutine reads its events into a
// channel. close(stop) plus closing the upstream stream ends the reader,
// which close always joins.
type leg struct {
	st     *stream
	events chan sseEvent
	stop   chan struct{}
	joined sync.WaitGroup
	once   sync.Once
}

// open starts reading st.
func (l *leg) open(st *stream) {
	l.st, l.events, l.stop = st, make(chan sseEvent, 16), make(chan struct{})
	l.joined.Add(1)
	go l.read()
}

func (l *leg) read() {
	defer l.joined.Done()
	sr := openai.NewSSEReader(l.st.body, 0)
	for {
		data, err := sr.Next()
		ev := sseEvent{err: err}
		if err == nil {
			ev.data = append([]byte(nil), data...)
		}
		select {
		case l.events <- ev:
		case <-l.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// close ends the upstream stream, joins the reader, then releases the
// response. Idempotent.
func (l *leg) close() {
	l.once.Do(func() {
		close(l.stop)
		if l.st == nil { // eventsLeg: nothing to read
			return
		}
		l.st.closeBody()
		l.joined.Wait()
		l.st.close()
	})
}

// streamLimits bound a relayed stream (see Config).
type streamLimits struct {
	firstEvent, ping, idle, total time.Duration
	drain                         time.Duration // see relay.drain
}

func (o *Orchestrator) streamLimits() streamLimits {
	return streamLimits{firstEvent: o.cfg.FirstEventTimeout, ping: o.cfg.PingInterval, idle: o.cfg.StreamIdleTimeout,
		total: o.cfg.StreamTotalTimeout, drain: o.drainWait}
}

func newRelay(f *flight, st *stream, c *protocol.Context, lim streamLimits, start time.Time) *relay {
	rl := &relay{f: f, ctx: c, lim: lim, start: start, chunks: getChunkReader()}
	rl.firstLeg.open(st)
	rl.leg = &rl.firstLeg
	return rl
}

// awaitFirst waits until firstBy for the first event, so that a worker that
// fails before sending anything can still be retried elsewhere.
func (rl *relay) awaitFirst(firstBy time.Time) error {
	timer := time.NewTimer(firstBy.Sub(rl.f.now()))
	defer timer.Stop()
	select {
	case <-rl.f.ctx.Done():
		return errCancelled
	case ev := <-rl.leg.events:
		switch {
		case ev.err != nil:
			return fmt.Errorf("stream ended before its first event: %w", ev.err)
		case openai.IsDone(ev.data):
			return fmt.Errorf("%w: [DONE] before any content", errStreamCut)
		}
		c, err := rl.chunks.read(ev.data)
		if err := eventFailure(c, err, ev.data); err != nil {
			return err
		}
		if c.isError {
			return fmt.Errorf("worker error event: %s", eventError(ev.data).Message)
		}
		rl.first, rl.firstChunk = ev, c // emitted as read: nothing parses in between
		return nil
	case <-timer.C:
		return fmt.Errorf("%w: no event within %s", errTimeout, rl.lim.firstEvent)
	}
}

// abort ends the upstream stream and releases what the relay holds.
// Idempotent.
func (rl *relay) abort() {
	rl.once.Do(func() {
		rl.leg.close()
		putChunkReader(rl.chunks)
	})
}

// finish ends the request the relay carried.
func (rl *relay) finish(status int, err error) {
	f := rl.f
	f.genRan = status == http.StatusOK // the gen worker now holds prompt and output
	if f.outputTokens == 0 {
		f.outputTokens = rl.contentEvents
	}
	f.genDur = f.now().Sub(rl.start)
	f.end(status, err)
}

// run relays until the stream ends; see Response.Relay. It runs on
// fasthttp's connection goroutine after the handler returned, where a
// panic would take the process down: a panic is recovered, logged and the
// request recorded as failed, with everything released.
func (rl *relay) run(w *bufio.Writer) {
	status, err := http.StatusInternalServerError, error(nil)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in relay: %v", p)
			rl.f.logPanic("relay", p)
		}
		rl.abort()
		rl.finish(status, err)
	}()
	status, err = rl.loop(w)
}

func (rl *relay) loop(w *bufio.Writer) (int, error) {
	rl.newAnswer()
	if err := rl.emit(w, rl.first.data, rl.firstChunk); err != nil {
		return rl.halt(w, err)
	}
	if err := rl.flushUnlessPending(w); err != nil {
		return rl.halt(w, err)
	}
	// One timer stands for the ping, idle and total limits: it fires at the
	// earliest of their deadlines, as of when it was last set, and is not
	// touched per event; when it fires, the deadlines are checked against
	// the events since. A select over fewer channels costs less per event.
	now := rl.f.now
	lastWrite := now()
	lastEvent, endBy := lastWrite, rl.start.Add(rl.lim.total)
	next := func(t time.Time) time.Duration {
		return min(lastWrite.Add(rl.lim.ping).Sub(t), lastEvent.Add(rl.lim.idle).Sub(t), endBy.Sub(t))
	}
	timer := time.NewTimer(next(lastWrite))
	defer timer.Stop()
	for {
		select {
		case <-rl.f.ctx.Done():
			return statusClientClosed, errClientGone
		case ev := <-rl.leg.events:
			if ev.err != nil {
				if rl.migrate(w, failDied, ev.err) {
					lastWrite, lastEvent = now(), now()
					continue
				}
				return rl.end(w, ev.err)
			}
			if openai.IsDone(ev.data) {
				if rl.migrate(w, failDied, errStreamCut) {
					lastWrite, lastEvent = now(), now()
					continue
				}
				status, err := rl.end(w, nil)
				rl.drain()
				return status, err
			}
			if err := rl.forward(w, ev.data); err != nil {
				if !errors.Is(err, errClientWrite) && rl.migrate(w, migrationFailure(err), err) {
					lastWrite, lastEvent = now(), now()
					continue
				}
				return rl.halt(w, err)
			}
			if err := rl.flushUnlessPending(w); err != nil {
				return rl.halt(w, err)
			}
			lastWrite = now()
			lastEvent = lastWrite
		case <-timer.C:
			t := now()
			switch {
			case !t.Before(endBy):
				return rl.failStream(w, errStreamTooLong)
			case t.Sub(lastEvent) >= rl.lim.idle:
				if !rl.migrate(w, failStalled, errStreamIdle) {
					return rl.failStream(w, errStreamIdle)
				}
				lastWrite, lastEvent = now(), now()
				t = lastWrite
			case t.Sub(lastWrite) >= rl.lim.ping:
				if openai.WriteComment(w, "ping") != nil || w.Flush() != nil {
					return statusClientClosed, errClientGone
				}
				lastWrite = t
			}
			timer.Reset(next(t))
		}
	}
}

// defaultDrainWait bounds how long drain waits for the end of a worker's
// body after its [DONE].
const defaultDrainWait = 100 * time.Millisecond

// drain reads the worker's body to its end after [DONE], which the client
// already has, so that the connection goes back to the pool: a body left
// unread must be closed, and every streamed request would then dial a new
// connection to its gen worker (measured: a dial per request, about a
// tenth of duet's CPU per stream, and a socket in TIME_WAIT each). The
// engines end the body right after [DONE] (the last chunk of a chunked
// response), so the end is usually already read. Events after [DONE] are
// ignored; a body that does not end within lim.drain is closed as before.
func (rl *relay) drain() {
	timeout := time.NewTimer(rl.lim.drain)
	defer timeout.Stop()
	for {
		select {
		case ev := <-rl.leg.events:
			if ev.err != nil {
				return
			}
		case <-timeout.C:
			return
		case <-rl.f.ctx.Done():
			return
		}
	}
}

// flushUnlessPending sends what was written to the client unless another
// event is already waiting: events that arrive together leave in one
// write, and none waits for a later one.
func (rl *relay) flushUnlessPending(w *bufio.Writer) error {
	if len(rl.leg.events) > 0 {
		return nil
	}
	if w.Flush() != nil {
		return errClientWrite
	}
	return nil
}

// halt ends the relay after forward failed: the client is gone, or the
// worker broke the stream (the client gets an error event).
func (rl *relay) halt(w *bufio.Writer, err error) (int, error) {
	if errors.Is(err, errClientWrite) {
		return statusClientClosed, errClientGone
	}
	if rl.withheld != nil { // the worker's own error event, as it would have been relayed
		_ = openai.WriteEvent(w, rl.withheld)
		_ = openai.WriteDone(w)
		_ = w.Flush()
		return http.StatusBadGateway, err
	}
	return rl.failStream(w, err)
}

// end closes a stream whose upstream ended: cleanly after [DONE] or a
// finish_reason, as a worker failure otherwise.
func (rl *relay) end(w *bufio.Writer, readErr error) (int, error) {
	if rl.f.ctx.Err() != nil { // the stream was cut because the client left
		return statusClientClosed, errClientGone
	}
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

// eventFailure says why an event (read into c, or failing with err) ends
// the request as a gen worker failure: it is not a JSON object, or a
// choice ended with a failure reason (abort, error, ...). nil otherwise.
func eventFailure(c chunk, err error, data []byte) error {
	switch {
	case err != nil:
		return fmt.Errorf("generation worker sent an event that is not a JSON object (%v): %s", err, truncate(data, 200))
	case c.failed:
		return fmt.Errorf("%w (finish_reason %q)", errFailureFinish, c.finish)
	}
	return nil
}

// errFailureFinish marks an event whose finish reason says the worker
// gave up on the request (abort, error, ...).
var errFailureFinish = errors.New("generation worker gave up on the request")

// errClientWrite marks a write to the client that failed: the client is
// gone. Every other error forward returns is the worker's fault.
var errClientWrite = errors.New("client write failed")

// forward writes one worker event to the client. The event is read as JSON
// once: its finish reason, usage (patched with the context phase's prompt
// and cached tokens), content (for TTFT) and error. An event that is not a
// JSON object, or that ends the request with a failure finish reason,
// stops the relay with a worker error; a worker's error event is relayed
// in OpenAI's shape and fails the request when the stream ends.
func (rl *relay) forward(w *bufio.Writer, data []byte) error {
	c, err := rl.chunks.read(data)
	if err := eventFailure(c, err, data); err != nil {
		return err
	}
	return rl.emit(w, data, c)
}

// emit writes one event read into c (see forward), unflushed.
func (rl *relay) emit(w *bufio.Writer, data []byte, c chunk) error {
	if c.isError {
		e := eventError(data)
		if rl.answer != nil { // held back: the answer may go on elsewhere
			rl.withheld = e.JSON()
			return fmt.Errorf("%w: %s", errWorkerEvent, e.Message)
		}
		rl.workerErr = fmt.Errorf("%w: %s", errWorkerEvent, e.Message)
		data = e.JSON()
	} else {
		if rl.answer != nil {
			rl.answer.add(c)
		}
		var u openai.Usage
		if rl.answer.continued() {
			data, u = rl.chunks.splice(data, c, rl.answer)
		} else {
			data, u = rl.chunks.rewrite(data, c, rl.ctx)
		}
		if c.usage != nil {
			rl.f.cachedTokens, rl.f.outputTokens = u.CachedTokens(), u.CompletionTokens
		}
	}
	rl.finished = rl.finished || c.finish != ""
	if c.content {
		if rl.f.ttft == 0 {
			rl.f.ttft = rl.f.sinceStart()
		}
		rl.contentEvents++
	}
	rl.f.events++
	rl.f.bytes += len(data)
	if openai.WriteEvent(w, data) != nil {
		return errClientWrite
	}
	return nil
}
