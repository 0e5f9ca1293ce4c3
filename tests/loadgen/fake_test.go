package loadgen

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
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

// fakeRequest is what the fake engine received, and when on its clock.
type fakeRequest struct {
	at, end             time.Time
	corrID, affinity    string
	requestID, userHdr  string
	host                string // the URL's host the request was sent to
	messages            []fakeMessage
	maxTokens           int
	stream, includeUsed bool
	ignoreEOS           any
	reply               string
}

// fakeEngineURL is the base URL a run against a fakeEngine targets.
const fakeEngineURL = "http://fake-engine"

// fakeEngine is an OpenAI-compatible streaming server on a fake clock: it
// records every request under a mutex, tracks which sessions are open
// (assuming each session sends turnsPerSession turns), and answers with
// chunks content chunks chunkDelay apart on its clock, so an answer takes
// exactly chunks x chunkDelay. It stops when its client goes away. Runs
// reach it in memory (runFake).
type fakeEngine struct {
	clock           *fakeClock
	chunks          int
	chunkDelay      time.Duration
	chunkDelays     []time.Duration // the n-th request's, in arrival order; chunkDelay past the end
	turnsPerSession int

	mu        sync.Mutex // guards the fields below
	reqs      []*fakeRequest
	turns     map[string]int
	open      map[string]bool
	maxActive int
}

// newFakeEngine returns an engine whose answers take 4 x 1 ms.
func newFakeEngine(turnsPerSession int) *fakeEngine {
	return &fakeEngine{clock: newFakeClock(), chunks: 4, chunkDelay: time.Millisecond, turnsPerSession: turnsPerSession,
		turns: map[string]int{}, open: map[string]bool{}}
}

func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	req := &fakeRequest{at: f.clock.Now(), corrID: r.Header.Get(DefaultSessionHeader), affinity: r.Header.Get(AffinityHeader),
		requestID: r.Header.Get("X-Request-ID"), userHdr: r.Header.Get("X-User"), host: r.Host, messages: body.Messages,
		maxTokens: body.MaxTokens, stream: body.Stream, ignoreEOS: body.IgnoreEOS}
	req.includeUsed = body.StreamOptions != nil && body.StreamOptions.IncludeUsage
	f.mu.Lock()
	delay := f.chunkDelay
	if n := len(f.reqs); n < len(f.chunkDelays) {
		delay = f.chunkDelays[n]
	}
	f.reqs = append(f.reqs, req)
	f.open[req.corrID] = true
	f.maxActive = max(f.maxActive, len(f.open))
	f.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	write := func(s string) bool {
		_, err := fmt.Fprintf(w, "data: %s\n\n", s)
		fl.Flush()
		return err == nil
	}
	if !write(roleChunk) {
		return
	}
	for i := 0; i < f.chunks; i++ {
		if f.clock.Sleep(r.Context(), delay) != nil {
			return // the client went away
		}
		piece := fmt.Sprintf("%s-%d ", req.requestID[:8], i)
		req.reply += piece
		if !write(content(piece)) {
			return
		}
	}
	write(finishChunk)
	write(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":0,"prompt_tokens_details":{"cached_tokens":%d}}}`,
		100*len(body.Messages), f.chunks, 50*(len(body.Messages)-1)))
	// Book-keeping before [DONE]: the client may start its next request as
	// soon as it reads it.
	f.mu.Lock()
	req.end = f.clock.Now()
	f.turns[req.corrID]++
	if f.turns[req.corrID] == f.turnsPerSession {
		delete(f.open, req.corrID)
	}
	f.mu.Unlock()
	write("[DONE]")
}

func (f *fakeEngine) requests() []*fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*fakeRequest(nil), f.reqs...)
}

// bySession groups the requests by correlation id, in arrival order.
func (f *fakeEngine) bySession() map[string][]*fakeRequest {
	out := map[string][]*fakeRequest{}
	for _, r := range f.requests() {
		out[r.corrID] = append(out[r.corrID], r)
	}
	return out
}

// offsets returns when each session's turns arrived, since the clock
// started, keyed by correlation id.
func (f *fakeEngine) offsets() map[string][]time.Duration {
	out := map[string][]time.Duration{}
	for id, turns := range f.bySession() {
		for _, r := range turns {
			out[id] = append(out[id], r.at.Sub(f.clock.start))
		}
	}
	return out
}

// sendTimes returns when every request arrived, since the clock started,
// in time order.
func (f *fakeEngine) sendTimes() []time.Duration {
	var out []time.Duration
	for _, r := range f.requests() {
		out = append(out, r.at.Sub(f.clock.start))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// testConfig is a small synthetic streaming workload against a fakeEngine.
func testConfig() Config {
	c := Defaults()
	c.URLs, c.Model, c.Streaming = []string{fakeEngineURL}, "test-model", true
	c.ISL, c.OSL, c.Seed, c.SeedSet = 20, 4, 7, true
	return c
}

// runFake runs cfg against f on f's fake clock, in a synctest bubble used
// only to tell when the run is idle: every goroutine blocked on a timer of
// the fake clock or on something that waits for one. Then the clock jumps
// to its next timer. Every time the run and f read comes from the fake
// clock, so schedules are exact and nothing depends on the machine's speed.
func runFake(t *testing.T, f *fakeEngine, cfg Config) *Result {
	t.Helper()
	tok, corpus := testDeps(t) // shared by every test: built outside the bubble
	var (
		res *Result
		err error
	)
	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			res, err = Run(t.Context(), cfg, Options{Tokenizer: tok, Corpus: corpus,
				HTTPClient: &http.Client{Transport: pipeTransport{f}}, Now: f.clock.Now, AfterFunc: f.clock.AfterFunc})
		}()
		for {
			synctest.Wait()
			select {
			case <-done:
				return
			default:
			}
			if !f.clock.Next() {
				t.Error("the run is blocked with no timer armed")
				return // t.Context is cancelled: the run stops
			}
		}
	})
	require.NoError(t, err)
	return res
}
