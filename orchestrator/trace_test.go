package orchestrator

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// traced runs one request through a traced harness and returns its spans
// by name.
func traced(t *testing.T, stream bool, hdr map[string]string) (map[string]tracetest.SpanStub, *fakeWorker, *fakeWorker) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, gen := newFakeWorker(t, ctxOK), newFakeWorker(t, genStream(3, true))
	h := newTracedHarness(t, testConfig(), []*fakeWorker{ctx}, []*fakeWorker{gen}, tp.Tracer("test"))
	resp, _ := h.run(testChatBody(stream, ""), hdr)
	require.Equal(t, http.StatusOK, resp.Status)
	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	return spans, ctx, gen
}

func TestTraceSpanTreeOfAStream(t *testing.T) {
	client := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	spans, ctx, gen := traced(t, true, map[string]string{"traceparent": client})
	root := spans[spanRequest]
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", root.SpanContext.TraceID().String(), "the client's trace")
	require.Equal(t, "00f067aa0ba902b7", root.Parent.SpanID().String(), "a child of the client's span")
	for _, name := range []string{spanRoute, spanContext, spanFirstEvent, spanStream} {
		s, ok := spans[name]
		require.True(t, ok, "span %s", name)
		require.Equal(t, root.SpanContext.SpanID(), s.Parent.SpanID(), "%s is a child of the request's span", name)
		require.False(t, s.EndTime.Before(s.StartTime), name)
	}
	require.False(t, spans[spanStream].StartTime.Before(spans[spanFirstEvent].EndTime), "the stream follows its first event")
	// Each worker got the traceparent of the span that called it.
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-"+spans[spanContext].SpanContext.SpanID().String()+"-01", ctx.traceparents()[0])
	require.True(t, strings.Contains(gen.traceparents()[0], spans[spanFirstEvent].SpanContext.SpanID().String()))
}

func TestTraceOfAnAnswer(t *testing.T) {
	spans, _, _ := traced(t, false, nil)
	require.Contains(t, spans, spanFirstEvent)
	require.NotContains(t, spans, spanStream, "an answer has no stream")
	require.False(t, spans[spanRequest].Parent.IsValid(), "no client trace: a root span")
}

func TestNoTracerPassesTheClientsTraceparent(t *testing.T) {
	ctx, gen := newFakeWorker(t, ctxOK), newFakeWorker(t, genStream(2, true))
	h := newHarness(t, testConfig(), []*fakeWorker{ctx}, []*fakeWorker{gen})
	resp, _ := h.run(testChatBody(true, ""), map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	require.Equal(t, http.StatusOK, resp.Status)
	require.Equal(t, []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, ctx.traceparents(), "tracing off: the client's traceparent passes through")
	require.Equal(t, ctx.traceparents(), gen.traceparents())
}

func TestTraceOfAMigratedStream(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	d := &firstDies{first: chatLeg("A", 1, []string{" one"}, false), then: chatLeg("B", 2, []string{" two"}, true)}
	h := newTracedHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, d.gens(t, 2), tp.Tracer("test"))
	resp, _ := h.run(testChatBody(true, ""), nil)
	require.Equal(t, http.StatusOK, resp.Status)
	count := map[string]int{}
	var root tracetest.SpanStub
	for _, s := range exp.GetSpans() { // ended spans only
		count[s.Name]++
		if s.Name == spanRequest {
			root = s
		}
	}
	require.Equal(t, 2, count[spanStream], "each leg's stream span ends")
	require.Equal(t, 1, count[spanMigration])
	require.Contains(t, root.Attributes, attribute.Int("duet.migrations", 1))
}
