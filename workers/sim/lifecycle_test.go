package sim

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/openai"
)

// slowConfig paces tokens at 10 ms of real time so requests overlap.
func slowConfig() Config {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.TimeScale = 1
	cfg.ITLBase, cfg.ITLPerSeq, cfg.PrefillOverhead = 10*time.Millisecond, 0, 0
	return cfg
}

// background posts body in a goroutine; wait joins it and returns the
// result.
func background(t *testing.T, url string, body any) (wait func() httpResult) {
	var wg sync.WaitGroup
	var res httpResult
	var err error
	wg.Go(func() { res, err = doErr(http.MethodPost, url, body, nil) })
	return func() httpResult {
		wg.Wait()
		require.NoError(t, err)
		return res
	}
}

func TestQueueFullGets429(t *testing.T) {
	cfg := slowConfig()
	cfg.MaxNumSeqs, cfg.MaxWaiting = 1, 0
	w := startWorker(t, cfg)
	first := background(t, w.url+"/v1/chat/completions", chatReq("first", map[string]any{"max_tokens": 30}))
	waitFor(t, "first runs", func() bool { return w.s.sched.stats().Running == 1 })
	r := post(t, w.url+"/v1/chat/completions", chatReq("second", nil))
	require.Equal(t, http.StatusTooManyRequests, r.status)
	require.Equal(t, openai.ErrTypeRateLimit, r.errorBody(t).Error.Type)
	require.Equal(t, http.StatusOK, first().status)
	require.Equal(t, uint64(1), w.s.metrics.requests[phaseAggregated][outcomeRejected].Load())
}

func TestWaitingRequestRunsLater(t *testing.T) {
	cfg := slowConfig()
	cfg.MaxNumSeqs, cfg.MaxWaiting = 1, 4
	w := startWorker(t, cfg)
	first := background(t, w.url+"/v1/chat/completions", chatReq("first", map[string]any{"max_tokens": 20}))
	waitFor(t, "first runs", func() bool { return w.s.sched.stats().Running == 1 })
	second := background(t, w.url+"/v1/chat/completions", chatReq("second", map[string]any{"max_tokens": 2}))
	waitFor(t, "second waits", func() bool { return w.s.sched.stats().Waiting == 1 })
	m := do(t, http.MethodGet, w.url+"/metrics", nil, nil)
	require.Contains(t, string(m.body), "vllm:num_requests_waiting{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1\n")
	require.Equal(t, http.StatusOK, first().status)
	r := second()
	require.Equal(t, http.StatusOK, r.status)
	ttft, err := strconv.Atoi(r.header.Get(headerTTFTUs))
	require.NoError(t, err)
	require.Greater(t, ttft, 0, "the queueing shows in the modelled TTFT")
}

func TestKVPressureMakesRequestsWait(t *testing.T) {
	cfg := slowConfig()
	cfg.BlockSize, cfg.KVCapacityBlocks = 16, 8
	w := startWorker(t, cfg)
	// Each request reserves prompt (~12 tokens) + 60 output tokens = 5 blocks.
	first := background(t, w.url+"/v1/chat/completions", chatReq("first", map[string]any{"max_tokens": 60, "ignore_eos": true}))
	waitFor(t, "first runs", func() bool { return w.s.sched.stats().Running == 1 })
	second := background(t, w.url+"/v1/chat/completions", chatReq("second", map[string]any{"max_tokens": 60}))
	waitFor(t, "second waits for blocks", func() bool { return w.s.sched.stats().Waiting == 1 })
	require.Equal(t, http.StatusOK, first().status)
	require.Equal(t, http.StatusOK, second().status)
}

func TestShutdownLetsInflightFinish(t *testing.T) {
	w := startWorker(t, slowConfig())
	stream := background(t, w.url+"/v1/chat/completions", chatReq("graceful", map[string]any{"max_tokens": 20, "stream": true}))
	waitFor(t, "running", func() bool { return w.s.sched.stats().Running == 1 })
	require.NoError(t, w.stop(t))
	r := stream()
	events := sseEvents(t, r.body)
	require.True(t, openai.IsDone(events[len(events)-1]), "the stream completed within the grace period")
	require.Len(t, events, 1+20+1+1)
}

func TestShutdownAbortsAfterGrace(t *testing.T) {
	cfg := slowConfig()
	cfg.ShutdownTimeout = 100 * time.Millisecond
	w := startWorker(t, cfg)
	stream := background(t, w.url+"/v1/chat/completions", chatReq("abort", map[string]any{"max_tokens": 100000, "stream": true, "ignore_eos": true}))
	waitFor(t, "running", func() bool { return w.s.sched.stats().Running == 1 })
	start := time.Now()
	require.NoError(t, w.stop(t))
	require.Less(t, time.Since(start), 5*time.Second)
	events := sseEvents(t, stream().body)
	require.True(t, openai.IsDone(events[len(events)-1]))
	require.Contains(t, string(events[len(events)-2]), `"error"`, "an error event precedes [DONE]")
}

// Regression (issue 12, found by TestSGLangBootstrapServer on a loaded
// machine): fasthttp's Shutdown closes only the listeners Serve has
// registered, so a stop arriving before Serve's goroutine ran left it
// accepting forever.
func TestServeReturnsWhenStoppedBeforeItStarts(t *testing.T) {
	for i := 0; i < 20; i++ {
		s, err := New(testConfig("mixed", ProtocolTRTLLM), testTokenizer(t, "cl100k_base"), nil)
		require.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, ln) }()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(20 * time.Second): // a hang, not a timing check
			t.Fatalf("run %d: Serve still running after a stop that came before it started", i)
		}
	}
}
