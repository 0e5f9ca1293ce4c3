package loadgen

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tickClock returns a clock that advances 10 ms per call, starting at
// t0 + 10 ms: readStream reads it once per event, so event i arrives at
// (i+1) x 10 ms.
func tickClock(t0 time.Time) func() time.Time {
	n := 0
	return func() time.Time {
		n++
		return t0.Add(time.Duration(n) * 10 * time.Millisecond)
	}
}

func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("data: " + e + "\n\n")
	}
	return b.String()
}

const (
	roleChunk   = `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`
	finishChunk = `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`
	usageChunk  = `{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":3,"total_tokens":103,"prompt_tokens_details":{"cached_tokens":64}}}`
)

func content(s string) string {
	return `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + s + `"},"finish_reason":null}]}`
}

func TestReadStream(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(i int) time.Time { return t0.Add(time.Duration(i+1) * 10 * time.Millisecond) }
	cases := []struct {
		name       string
		body       string
		wantErr    string
		wantText   string
		wantChunks int
		first      int // event index of the first content chunk, -1 for none
		last       int
		usage      bool
	}{
		{name: "role-only chunk does not count for TTFT",
			body:  sse(roleChunk, content("Hel"), content("lo"), content("!"), finishChunk, usageChunk, "[DONE]"),
			first: 1, last: 3, wantText: "Hello!", wantChunks: 3, usage: true},
		{name: "usage-only chunk carries usage and no content",
			body:  sse(content("a"), usageChunk, "[DONE]"),
			first: 0, last: 0, wantText: "a", wantChunks: 1, usage: true},
		{name: "[DONE] ends the stream", body: sse(content("a"), "[DONE]", content("never read")),
			first: 0, last: 0, wantText: "a", wantChunks: 1},
		{name: "a finish_reason without [DONE] is complete", body: sse(content("a"), finishChunk),
			first: 0, last: 0, wantText: "a", wantChunks: 1},
		{name: "in-stream error event", body: sse(content("a"), `{"error":{"message":"worker died","type":"server_error","param":null,"code":null}}`, "[DONE]"),
			wantErr: ErrInStream, first: 0, last: 0, wantChunks: 1},
		{name: "truncated stream is an error", body: sse(roleChunk, content("a"), content("b")),
			wantErr: ErrTruncated, first: 1, last: 2, wantChunks: 2},
		{name: "stream cut in the middle of an event", body: sse(content("a")) + `data: {"choices":[{"delta":{"cont`,
			wantErr: ErrTruncated, first: 0, last: 0, wantChunks: 1},
		{name: "undecodable chunk", body: sse("{not json"), wantErr: ErrInvalid, first: -1},
		{name: "completions text chunks", body: sse(`{"object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":null}]}`,
			`{"object":"text_completion","choices":[{"index":0,"text":"","finish_reason":"stop"}]}`, "[DONE]"),
			first: 0, last: 0, wantText: "x", wantChunks: 1},
		{name: "reasoning content counts for timing but is not resent",
			body:  sse(`{"choices":[{"delta":{"reasoning_content":"hmm"}}]}`, content("a"), "[DONE]"),
			first: 0, last: 1, wantText: "a", wantChunks: 2},
		{name: "comments and keep-alive pings are skipped", body: ": ping\n\n" + sse(content("a"), "[DONE]"),
			first: 0, last: 0, wantText: "a", wantChunks: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ex := &exchange{start: t0}
			readStream(strings.NewReader(tc.body), tickClock(t0), ex, func(err error) *ErrorDetails { return newError(ErrRead, "%v", err) })
			if tc.wantErr == "" {
				require.Nil(t, ex.err)
			} else {
				require.NotNil(t, ex.err)
				require.Equal(t, tc.wantErr, ex.err.Type, ex.err.Message)
			}
			require.Equal(t, tc.wantChunks, ex.chunks)
			if tc.first >= 0 {
				require.Equal(t, at(tc.first), ex.first, "first content")
				require.Equal(t, at(tc.last), ex.last, "last content")
			}
			if tc.wantErr == "" {
				require.Equal(t, tc.wantText, ex.text.String())
			}
			require.Equal(t, tc.usage, ex.usage != nil)
			if tc.usage {
				require.Equal(t, 64, ex.usage.CachedTokens())
			}
		})
	}
}

func TestInStreamErrorNamesServerType(t *testing.T) {
	ex := &exchange{}
	readStream(strings.NewReader(sse(`{"error":{"message":"worker died","type":"server_error"}}`)), time.Now, ex, nil)
	require.Equal(t, ErrInStream, ex.err.Type)
	require.Equal(t, "server_error: worker died", ex.err.Message)
	require.Nil(t, ex.err.Code)
}

func TestClientErrors(t *testing.T) {
	arrived := make(chan struct{}) // a "stall" request reached the server
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("case") {
		case "503":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"message":"no healthy worker","type":"service_unavailable_error","param":null,"code":null}}`))
		case "500-plain":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "stall": // never answers: only the client can end the request
			_, _ = io.Copy(io.Discard, r.Body) // then the server watches the connection
			select {
			case arrived <- struct{}{}:
			default:
			}
			<-r.Context().Done()
		case "empty":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(sse(roleChunk, finishChunk, "[DONE]")))
		}
	}))
	defer srv.Close()
	cfg := Defaults()
	// No request ends by its timeout unless the server stalls: the
	// outcomes do not depend on how fast the machine is.
	cfg.Model, cfg.Streaming, cfg.URLs, cfg.RequestTimeout = "m", true, []string{srv.URL}, time.Hour
	do := func(c string, ctx context.Context) *ErrorDetails {
		cfg.CustomEndpoint = "/v1/chat/completions?case=" + c
		ex := NewClient(cfg, nil, 4).do(ctx, 0, []byte(`{}`), "r", "s")
		require.NotNil(t, ex.err, c)
		return ex.err
	}
	e := do("503", context.Background())
	require.Equal(t, "Service Unavailable", e.Type, "aiperf's type: the HTTP reason phrase")
	require.Equal(t, 503, *e.Code)
	require.Contains(t, e.Message, "no healthy worker", "the body, as aiperf keeps it")

	e = do("500-plain", context.Background())
	require.Equal(t, "Internal Server Error", e.Type)
	require.Equal(t, 500, *e.Code)

	require.Equal(t, ErrEmptyResponse, do("empty", context.Background()).Type)

	cfg.RequestTimeout = 50 * time.Millisecond
	require.Equal(t, ErrTimeout, do("stall", context.Background()).Type)
	cfg.RequestTimeout = time.Hour

	// Cancelled once the request is at the server, long before its timeout.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	e = do("stall", ctx)
	require.Equal(t, ErrCancelled, e.Type)
	require.Equal(t, 499, *e.Code)

	cfg.URLs = []string{"http://127.0.0.1:1"} // nothing listens on port 1
	require.Equal(t, ErrConnection, do("x", context.Background()).Type)
}

func TestStatusErrorIsAiperfs(t *testing.T) {
	e := statusError(502, []byte("<html>bad gateway</html>"))
	require.Equal(t, "Bad Gateway", e.Type)
	require.Equal(t, "<html>bad gateway</html>", e.Message)
	e = statusError(429, nil)
	require.Equal(t, "Too Many Requests", e.Type)
	require.Empty(t, e.Message)
	e = statusError(599, []byte("x"))
	require.Empty(t, e.Type, "no reason phrase: no type, as aiperf omits None")
}
