package orchestrator

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// stallAt is where a stalling worker stops answering.
type stallAt int

const (
	stallBeforeHeaders stallAt = iota // never sends the status line
	stallAfterHeaders                 // sends 200 and nothing else
	stallMidStream                    // sends two events, then nothing
)

// stallingWorker answers up to a point and then waits until duet closes
// the connection, which it reports on gone. It counts the connections it
// has open.
type stallingWorker struct {
	srv   *httptest.Server
	gone  chan struct{}
	calls atomic.Int32
	open  atomic.Int32
}

func newStallingWorker(t *testing.T, at stallAt) *stallingWorker {
	s := &stallingWorker{gone: make(chan struct{}, 16)}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		if at >= stallAfterHeaders {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			for i := 0; at == stallMidStream && i < 2; i++ {
				fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"},\"finish_reason\":null}]}\n\n", i)
			}
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done() // net/http ends it when the connection closes
		s.gone <- struct{}{}
	}))
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.open.Add(-1)
		}
	}
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

// awaitGone waits for the worker to see a connection close.
func (s *stallingWorker) awaitGone(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.gone:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the worker never saw its connection close", what)
	}
}

// handleAsync runs Handle (and the relay of a stream) in the background
// with a context the test cancels; the outcome arrives on the channel.
func (h *harness) handleAsync(ctx context.Context, body []byte) <-chan *Response {
	out := make(chan *Response, 1)
	go func() {
		resp := h.o.Handle(ctx, Incoming{Endpoint: 1, Body: body, RequestID: "r", Received: time.Now()})
		if resp.Streaming() {
			resp.Relay(bufio.NewWriter(io.Discard))
		}
		out <- resp
	}()
	return out
}

func awaitResponse(t *testing.T, out <-chan *Response) *Response {
	t.Helper()
	select {
	case resp := <-out:
		return resp
	case <-time.After(5 * time.Second):
		t.Fatal("the request did not end after its client left")
		return nil
	}
}

// Regression (issue 11): a client that left during the context phase did
// not stop it, and the generation phase still ran.
func TestClientLeavingDuringContextPhaseCancelsIt(t *testing.T) {
	ctxW, gen := newStallingWorker(t, stallBeforeHeaders), newFakeWorker(t, genStream(2, true))
	h := newHarness(t, testConfig(), nil, []*fakeWorker{gen})
	h.addWorker(t, "ctx-x", ctxW.srv.URL, true)
	ctx, leave := context.WithCancel(context.Background())
	out := h.handleAsync(ctx, testChatBody(true, ""))
	require.Eventually(t, func() bool { return ctxW.calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	leave()
	ctxW.awaitGone(t, "context phase")
	require.Equal(t, statusClientClosed, awaitResponse(t, out).Status)
	require.Empty(t, gen.calls(), "no generation phase for a client that left")
	require.Zero(t, h.pool.Get("ctx-x").Ejections(), "a cancelled call says nothing about the worker")
}

// Regression (issue 11): a gen worker that never sent its headers held a
// goroutine and a pooled connection until stream_total_timeout + 5 s, and a
// client leaving did not close the call.
func TestClientLeavingBeforeGenerationHeadersClosesTheCall(t *testing.T) {
	for _, at := range []stallAt{stallBeforeHeaders, stallAfterHeaders, stallMidStream} {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			gen := newStallingWorker(t, at)
			cfg := testConfig()
			cfg.FirstEventTimeout, cfg.StreamIdleTimeout = time.Minute, time.Minute
			h := newHarness(t, cfg, []*fakeWorker{newFakeWorker(t, ctxOK)}, nil)
			h.addWorker(t, "gen-x", gen.srv.URL, false)
			ctx, leave := context.WithCancel(context.Background())
			out := h.handleAsync(ctx, testChatBody(true, ""))
			require.Eventually(t, func() bool { return gen.calls.Load() == 1 }, 5*time.Second, time.Millisecond)
			time.Sleep(20 * time.Millisecond) // let the worker reach its stall point
			leave()
			gen.awaitGone(t, "generation phase")
			awaitResponse(t, out)
			require.Equal(t, 1.0, testutil.ToFloat64(h.o.metrics.requests.WithLabelValues("chat", "499")), "recorded as 499")
			require.Eventually(t, func() bool { return gen.open.Load() == 0 }, 5*time.Second, time.Millisecond,
				"the worker's connection is closed, not pooled")
		})
	}
}

// Regression (issue 11): on a first-event timeout the call to a worker
// that never answers was abandoned to a goroutine; now the timeout closes
// it, and goroutines and connections return to their baseline.
func TestTimeoutsCloseTheirCalls(t *testing.T) {
	gen := newStallingWorker(t, stallBeforeHeaders)
	cfg := testConfig()
	cfg.FirstEventTimeout, cfg.MaxRetries = 100*time.Millisecond, 0
	h := newHarness(t, cfg, []*fakeWorker{newFakeWorker(t, ctxOK)}, nil)
	h.addWorker(t, "gen-x", gen.srv.URL, false)
	_, _ = h.run(testChatBody(true, ""), nil) // warm the ctx worker's pooled connection
	gen.awaitGone(t, "warm-up")
	baseline := runtime.NumGoroutine()
	for i := 0; i < 10; i++ {
		resp, out := h.run(testChatBody(true, ""), nil)
		require.Equal(t, http.StatusGatewayTimeout, resp.Status, out)
		gen.awaitGone(t, "first-event timeout")
	}
	require.Eventually(t, func() bool { return gen.open.Load() == 0 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= baseline+2 }, 5*time.Second, 10*time.Millisecond,
		"goroutines: %d, baseline %d", runtime.NumGoroutine(), baseline)
	require.Zero(t, h.pool.Get("gen-x").Ejections(), "a timeout does not eject")
}

// Regression: a pooled connection the worker closed while it sat idle
// (uvicorn closes them after 5 s) failed the next request, which passive
// health took for a dead worker.
func TestStaleKeepAliveConnectionIsRetriedNotEjected(t *testing.T) {
	ctxW, gen := newFakeWorker(t, ctxOK), newFakeWorker(t, genStream(2, true))
	h := newHarness(t, testConfig(), []*fakeWorker{ctxW}, []*fakeWorker{gen})
	for i := 0; i < 3; i++ {
		ctxW.srv.CloseClientConnections()
		gen.srv.CloseClientConnections()
		time.Sleep(10 * time.Millisecond) // the close reaches duet's idle connections
		resp, out := h.run(testChatBody(false, ""), nil)
		require.Equal(t, http.StatusOK, resp.Status, out)
	}
	require.Len(t, ctxW.calls(), 3, "one prefill per request")
	require.Positive(t, h.o.up.staleRetries.Load(), "the stale connections were retried")
	require.Zero(t, h.pool.Get("ctx-0").Ejections()+h.pool.Get("gen-0").Ejections())
}
