package tests

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver (protobuf, as
// otlptracehttp sends it) that keeps every span.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" {
			http.NotFound(w, req)
			return
		}
		raw, _ := io.ReadAll(req.Body)
		var export collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

// trace returns the received spans of a trace, by name.
func (r *otlpReceiver) trace(traceID string) map[string]*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]*tracepb.Span{}
	for _, s := range r.spans {
		if hex.EncodeToString(s.TraceId) == traceID {
			out[s.Name] = s
		}
	}
	return out
}

func TestTracingSpanTreeOverOTLP(t *testing.T) {
	recv := newOTLPReceiver(t)
	d := startServe(t, serveOptions{nCtx: 1, nGen: 1, tracing: fmt.Sprintf("{otlp_endpoint: %q}", recv.URL)})
	traceID, clientSpan := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	code, _, body := d.chat(t, true, "trace me", "", "traceparent", "00-"+traceID+"-"+clientSpan+"-01")
	require.Equal(t, http.StatusOK, code, string(body))
	want := []string{"duet.request", "route", "context", "generation.first_event", "generation.stream"}
	require.Eventually(t, func() bool { return len(recv.trace(traceID)) >= len(want) }, 20*time.Second, 50*time.Millisecond,
		"spans arrive within the batch timeout")
	spans := recv.trace(traceID)
	root := spans["duet.request"]
	require.Equal(t, clientSpan, hex.EncodeToString(root.ParentSpanId), "a child of the client's span")
	for _, name := range want[1:] {
		require.Contains(t, spans, name)
		require.Equal(t, root.SpanId, spans[name].ParentSpanId, "%s is a child of duet.request", name)
	}
	require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, spans["context"].Kind)
}

// SGLang's context leg runs beside the generation leg: it is traced too,
// and carries its span's traceparent.
func TestTracingSGLangContextLeg(t *testing.T) {
	recv := newOTLPReceiver(t)
	d := startServe(t, serveOptions{protocol: "sglang", nCtx: 1, nGen: 1, tracing: fmt.Sprintf("{otlp_endpoint: %q}", recv.URL)})
	traceID := "5bf92f3577b34da6a3ce929d0e0e4736"
	code, _, body := d.chat(t, true, "trace the prefill", "", "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Eventually(t, func() bool { _, ok := recv.trace(traceID)["context"]; return ok }, 20*time.Second, 50*time.Millisecond)
	spans := recv.trace(traceID)
	require.Equal(t, spans["duet.request"].SpanId, spans["context"].ParentSpanId)
}
