package loadgen

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/duet-serve/duet/tokenizer"
	"github.com/stretchr/testify/require"
)

var (
	testTokOnce sync.Once
	testTok     *tokenizer.Tokenizer
	testCorpus  *Corpus
)

// testDeps returns a tokenizer and the corpus, built once per test binary.
func testDeps(t *testing.T) (*tokenizer.Tokenizer, *Corpus) {
	t.Helper()
	testTokOnce.Do(func() {
		tok, err := tokenizer.New(tokenizer.Defaults())
		if err != nil {
			panic(err)
		}
		c, err := NewCorpus(tok)
		if err != nil {
			panic(err)
		}
		testTok, testCorpus = tok, c
	})
	return testTok, testCorpus
}

type fakeMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// fakeRequest is what the fake server received.
type fakeRequest struct {
	at, end             time.Time
	corrID, affinity    string
	requestID, userHdr  string
	messages            []fakeMessage
	maxTokens           int
	stream, includeUsed bool
	ignoreEOS           any
	reply               string
}

// fakeServer is an OpenAI-compatible streaming server that records every
// request under a mutex and tracks which sessions are open, assuming each
// session sends turnsPerSession turns.
type fakeServer struct {
	srv             *httptest.Server
	chunks          int
	chunkDelay      time.Duration
	turnsPerSession int

	mu        sync.Mutex // guards the fields below
	reqs      []*fakeRequest
	turns     map[string]int
	open      map[string]bool
	maxActive int
}

func newFakeServer(t *testing.T, turnsPerSession int) *fakeServer {
	f := &fakeServer{chunks: 4, chunkDelay: time.Millisecond, turnsPerSession: turnsPerSession,
		turns: map[string]int{}, open: map[string]bool{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.handle))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) handle(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages      []fakeMessage `json:"messages"`
		Stream        bool          `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		MaxTokens int `json:"max_completion_tokens"`
		IgnoreEOS any `json:"ignore_eos"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := &fakeRequest{at: time.Now(), corrID: r.Header.Get(DefaultSessionHeader), affinity: r.Header.Get(AffinityHeader),
		requestID: r.Header.Get("X-Request-ID"), userHdr: r.Header.Get("X-User"), messages: body.Messages,
		maxTokens: body.MaxTokens, stream: body.Stream, ignoreEOS: body.IgnoreEOS}
	req.includeUsed = body.StreamOptions != nil && body.StreamOptions.IncludeUsage
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.open[req.corrID] = true
	f.maxActive = max(f.maxActive, len(f.open))
	f.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	write := func(s string) {
		_, _ = fmt.Fprintf(w, "data: %s\n\n", s)
		fl.Flush()
	}
	write(roleChunk)
	for i := 0; i < f.chunks; i++ {
		time.Sleep(f.chunkDelay)
		piece := fmt.Sprintf("%s-%d ", req.requestID[:8], i)
		req.reply += piece
		write(content(piece))
	}
	write(finishChunk)
	write(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":0,"prompt_tokens_details":{"cached_tokens":%d}}}`,
		100*len(body.Messages), f.chunks, 50*(len(body.Messages)-1)))
	// Book-keeping before [DONE]: the client may start its next request as
	// soon as it reads it.
	f.mu.Lock()
	req.end = time.Now()
	f.turns[req.corrID]++
	if f.turns[req.corrID] == f.turnsPerSession {
		delete(f.open, req.corrID)
	}
	f.mu.Unlock()
	write("[DONE]")
}

func (f *fakeServer) requests() []*fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*fakeRequest(nil), f.reqs...)
}

// bySession groups the requests by correlation id, in arrival order.
func (f *fakeServer) bySession() map[string][]*fakeRequest {
	out := map[string][]*fakeRequest{}
	for _, r := range f.requests() {
		out[r.corrID] = append(out[r.corrID], r)
	}
	return out
}

// testConfig is a small synthetic streaming workload against url.
func testConfig(url string) Config {
	c := Defaults()
	c.URL, c.Model, c.Streaming = url, "test-model", true
	c.ISL, c.OSL, c.Seed, c.SeedSet = 20, 4, 7, true
	return c
}

func runFake(t *testing.T, cfg Config) *Result {
	t.Helper()
	tok, corpus := testDeps(t)
	res, err := Run(t.Context(), cfg, Options{Tokenizer: tok, Corpus: corpus})
	require.NoError(t, err)
	return res
}
