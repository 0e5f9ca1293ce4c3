package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// deployment is a running `duet serve` over a sim fleet.
type deployment struct {
	url  string
	proc *process
}

// serveOptions shape the YAML a test deployment runs.
type serveOptions struct {
	protocol   string
	policy     string
	nCtx, nGen int
	simArgs    string // extra YAML list items for both pools' args
	ctxArgs    string // extra YAML list items for the ctx pool only
	extra      string // extra orchestrator keys
	adminToken string
	queue      string // the queue section, YAML flow mapping
	debugAddr  string // server.debug_address
	tracing    string // the tracing section, YAML flow mapping
	router     string // extra router keys, YAML flow mapping entries ("load_weight: 1")
	kvEvents   bool   // the sims publish KV events and the router subscribes
	tokenizer  string // the tokenizer section, YAML flow mapping
	timeout    string // context, first event and stream idle timeouts (default 10s)
	restart    string // both pools' restart policy, YAML flow mapping (default: fast restarts)
	pool       string // extra keys of both pools, one YAML line ("lora_adapters: [a, b]")
}

func startServe(t *testing.T, o serveOptions) *deployment {
	t.Helper()
	if o.protocol == "" {
		o.protocol = "trtllm"
	}
	if o.policy == "" {
		o.policy = "round-robin"
	}
	if o.nCtx == 0 {
		o.nCtx, o.nGen = 2, 2
	}
	if o.timeout == "" {
		o.timeout = "10s"
	}
	if o.restart == "" {
		o.restart = "{delay: 100ms, max_delay: 500ms}"
	}
	port := freePorts(t, 1)[0]
	ctxBase, genBase := freePortRun(t, o.nCtx), freePortRun(t, o.nGen)
	ctxSide, genSide := freePortRun(t, o.nCtx), freePortRun(t, o.nGen) // sglang bootstrap ports
	args := `"--time-scale", "0.02", "--kv-transfer-timeout", "10s"` + o.simArgs
	ctxEvents, genEvents := "{}", "{}"
	if o.kvEvents {
		ctxEvents = fmt.Sprintf("{port_offset: %d}", freePortRun(t, o.nCtx)-ctxBase)
		genEvents = fmt.Sprintf("{port_offset: %d}", freePortRun(t, o.nGen)-genBase)
	}
	routerKeys := ""
	if o.router != "" {
		routerKeys = ", " + o.router
	}
	cfg := fmt.Sprintf(`
log: {level: info}
server: {host: 127.0.0.1, port: %d, admin_token: "%s", debug_address: "%s"}
orchestrator:
  protocol: %s
  context_timeout: %s
  first_event_timeout: %s
  stream_idle_timeout: %s
%s
router: {policy: %s%s}
queue: %s
tracing: %s
tokenizer: %s
fleet:
  run_dir: %s
  health_interval: 200ms
  unhealthy_threshold: 2
  shutdown_grace: 3s
  context:
    engine: sim
    count: %d
    base_port: %d
    side_port_base: %d
    start_timeout: 60s
    args: [%s%s]
    kv_events: %s
    restart: %s
    %s
  generation:
    engine: sim
    count: %d
    base_port: %d
    side_port_base: %d
    start_timeout: 60s
    args: [%s]
    kv_events: %s
    restart: %s
    %s
`, port, o.adminToken, o.debugAddr, o.protocol, o.timeout, o.timeout, o.timeout, o.extra, o.policy, routerKeys, queueYAML(o.queue), orEmpty(o.tracing), orEmpty(o.tokenizer), t.TempDir(),
		o.nCtx, ctxBase, ctxSide, args, o.ctxArgs, ctxEvents, o.restart, o.pool, o.nGen, genBase, genSide, args, genEvents, o.restart, o.pool)
	path := writeFile(t, "duet.yaml", cfg)
	p := startDuet(t, "serve", "--config", path)
	d := &deployment{url: fmt.Sprintf("http://127.0.0.1:%d", port), proc: p}
	waitHTTP(t, p, d.url+"/health", 90*time.Second)
	return d
}

// orEmpty is a YAML flow mapping, {} when empty.
func orEmpty(m string) string {
	if m == "" {
		return "{}"
	}
	return m
}

func queueYAML(q string) string {
	if q == "" {
		return "{enabled: false}"
	}
	return q
}

func (d *deployment) chat(t *testing.T, stream bool, content string, extra string, headers ...string) (int, http.Header, []byte) {
	limit := `"max_tokens":12,` // unless extra sets it: duet 400s a duplicate key
	if strings.Contains(extra, `"max_tokens"`) {
		limit = ""
	}
	body := fmt.Sprintf(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":%t,%s"ignore_eos":true,
	  "messages":[{"role":"system","content":"You are terse."},{"role":"user","content":%q}]%s}`, stream, limit, content, extra)
	return post(t, d.url+"/v1/chat/completions", body, headers...)
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u usage) cached() int {
	if u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// clusterInfo is the part of /cluster_info tests read.
type clusterInfo struct {
	Workers []struct {
		ID         string `json:"id"`
		URL        string `json:"url"`
		Role       string `json:"role"`
		Healthy    bool   `json:"healthy"`
		LoadTokens int64  `json:"load_tokens"`
		InFlight   int64  `json:"inflight"`
		workerCache
		// The router's view of the worker's cache: estimate, events or
		// fallback (and why), and how many blocks it holds.
		CacheSignal   string `json:"cache_signal"`
		SignalReason  string `json:"cache_signal_reason"`
		IndexedBlocks int    `json:"indexed_blocks"`
		KVBlockSize   int    `json:"kv_block_size"`
	} `json:"workers"`
	Fleet []struct {
		Name  string
		PID   int
		State string
		URL   string
	} `json:"fleet"`
	Tokenizer struct {
		Tokenizer    string `json:"tokenizer"`
		ChatTemplate string `json:"chat_template"`
	} `json:"tokenizer"`
}

// workerCache is the KV cache size the router assumes for a worker, and
// where that comes from.
type workerCache struct {
	Tokens int64  `json:"kv_cache_tokens"`
	Source string `json:"kv_cache_source"`
}

func (d *deployment) cluster(t *testing.T) clusterInfo {
	var ci clusterInfo
	require.Equal(t, http.StatusOK, getJSON(t, d.url+"/cluster_info", &ci))
	return ci
}

// requireIdle waits until no worker carries load: every lease was refunded.
func (d *deployment) requireIdle(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, w := range d.cluster(t).Workers {
			if w.LoadTokens != 0 || w.InFlight != 0 {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond, "leases leaked: %+v", d.cluster(t).Workers)
}

func TestServeEveryProtocol(t *testing.T) {
	for _, proto := range []string{"trtllm", "vllm", "sglang"} {
		t.Run(proto, func(t *testing.T) {
			d := startServe(t, serveOptions{protocol: proto, ctxArgs: `, "--kv-capacity-blocks", "12000"`})
			t.Run("workers report their KV cache size", func(t *testing.T) {
				// The way vLLM and SGLang workers report it; under
				// TensorRT-LLM's protocol, in the sim's own metrics.
				want := map[string]workerCache{"ctx": {12000 * 32, "worker"}, "gen": {14000 * 32, "worker"}}
				for _, w := range d.cluster(t).Workers {
					require.Equal(t, want[w.ID[:3]], w.workerCache, w.ID)
				}
			})
			t.Run("chat non-streaming", func(t *testing.T) {
				code, hdr, body := d.chat(t, false, "Tell me about rivers.", "", "X-Request-ID", "req-123")
				require.Equal(t, http.StatusOK, code, string(body))
				require.Equal(t, "req-123", hdr.Get("X-Request-ID"))
				require.NotEmpty(t, hdr.Get("X-Duet-Ctx-Worker"))
				require.NotEmpty(t, hdr.Get("X-Duet-Gen-Worker"))
				var r struct {
					Object  string `json:"object"`
					Choices []struct {
						Message      struct{ Content string } `json:"message"`
						FinishReason string                   `json:"finish_reason"`
					} `json:"choices"`
					Usage usage `json:"usage"`
				}
				require.NoError(t, json.Unmarshal(body, &r))
				require.Equal(t, "chat.completion", r.Object)
				require.Len(t, r.Choices, 1)
				require.NotEmpty(t, r.Choices[0].Message.Content)
				require.Equal(t, "length", r.Choices[0].FinishReason)
				require.Equal(t, 12, r.Usage.CompletionTokens)
				require.Greater(t, r.Usage.PromptTokens, 10)
			})
			t.Run("chat streaming", func(t *testing.T) {
				code, hdr, body := d.chat(t, true, "Tell me about lakes.", `,"stream_options":{"include_usage":true}`)
				require.Equal(t, http.StatusOK, code, string(body))
				require.Equal(t, "text/event-stream", hdr.Get("Content-Type"))
				requireChatStream(t, sseData(body), 12)
			})
			t.Run("completions", func(t *testing.T) {
				for _, stream := range []bool{false, true} {
					code, _, body := post(t, d.url+"/v1/completions",
						fmt.Sprintf(`{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"Once upon a time","max_tokens":5,"ignore_eos":true,"stream":%t}`, stream))
					require.Equal(t, http.StatusOK, code, string(body))
					require.Contains(t, string(body), `"object":"text_completion"`)
					if stream {
						events := sseData(body)
						require.Equal(t, "[DONE]", events[len(events)-1])
					}
				}
			})
			t.Run("repeated prompt reports cached tokens", func(t *testing.T) {
				prompt := strings.Repeat("The history of the river valley is long and rich. ", 40)
				var last usage
				for i := 0; i < 3; i++ { // round-robin: the third request returns to the first ctx worker
					code, _, body := d.chat(t, false, prompt, "")
					require.Equal(t, http.StatusOK, code, string(body))
					var r struct{ Usage usage }
					require.NoError(t, json.Unmarshal(body, &r))
					last = r.Usage
				}
				require.Greater(t, last.cached(), last.PromptTokens/2, "a warm ctx worker reuses the prompt's KV: %+v", last)
				require.LessOrEqual(t, last.cached(), last.PromptTokens)
			})
			t.Run("operational endpoints", func(t *testing.T) {
				var models struct {
					Data []struct{ ID string } `json:"data"`
				}
				require.Equal(t, http.StatusOK, getJSON(t, d.url+"/v1/models", &models))
				require.Equal(t, "meta-llama/Llama-3.1-8B-Instruct", models.Data[0].ID)
				ci := d.cluster(t)
				require.Len(t, ci.Workers, 4)
				require.Len(t, ci.Fleet, 4)
				resp, err := http.Get(d.url + "/metrics")
				require.NoError(t, err)
				metrics := readAll(t, resp)
				require.Contains(t, metrics, `duet_requests_total{endpoint="chat",status="200"}`)
				require.Contains(t, metrics, `duet_worker_healthy`)
				require.Contains(t, metrics, `duet_worker_kv_cache_tokens{role="context",source="worker",worker="ctx-0"} 384000`)
			})
			d.requireIdle(t)
		})
	}
}

// requireChatStream checks PROTOCOLS.md §4's shape of a chat stream.
func requireChatStream(t *testing.T, events []string, wantTokens int) {
	t.Helper()
	require.Equal(t, "[DONE]", events[len(events)-1])
	finish, usageSeen, content := 0, false, 0
	for _, e := range events[:len(events)-1] {
		var c struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta        struct{ Content *string } `json:"delta"`
				FinishReason *string                   `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		require.NoError(t, json.Unmarshal([]byte(e), &c), e)
		require.Equal(t, "chat.completion.chunk", c.Object)
		if c.Usage != nil {
			usageSeen = true
			require.Equal(t, wantTokens, c.Usage.CompletionTokens)
			require.Greater(t, c.Usage.PromptTokens, 0)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil && *ch.Delta.Content != "" {
				content++
			}
			if ch.FinishReason != nil {
				finish++
			}
		}
	}
	require.Equal(t, 1, finish, "exactly one finish_reason")
	require.True(t, usageSeen, "usage chunk with include_usage")
	require.Equal(t, wantTokens, content, "one content chunk per token")
}

func readAll(t *testing.T, resp *http.Response) string {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestServeBadInput(t *testing.T) {
	d := startServe(t, serveOptions{nCtx: 1, nGen: 1})
	cases := []struct {
		name, path, body string
		status           int
	}{
		{"malformed JSON", "/v1/chat/completions", `{"model":`, 400},
		{"messages wrong type", "/v1/chat/completions", `{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":"hi"}`, 400},
		{"empty messages", "/v1/chat/completions", `{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[]}`, 400},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404},
		{"n > 1", "/v1/chat/completions", `{"model":"meta-llama/Llama-3.1-8B-Instruct","n":3,"messages":[{"role":"user","content":"x"}]}`, 400},
		{"negative max_tokens", "/v1/chat/completions", `{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":-1,"messages":[{"role":"user","content":"x"}]}`, 400},
		{"missing prompt", "/v1/completions", `{"model":"meta-llama/Llama-3.1-8B-Instruct"}`, 400},
		{"batched prompt", "/v1/completions", `{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":["a","b"]}`, 400},
		{"oversized body", "/v1/completions", `{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"` + strings.Repeat("x", 9<<20) + `"}`, 413},
		{"unknown route", "/v1/embeddings", `{}`, 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := post(t, d.url+tc.path, tc.body)
			require.Equal(t, tc.status, code, string(body))
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			require.NotEmpty(t, e.Error.Message)
			require.NotEmpty(t, e.Error.Type)
		})
	}
	d.requireIdle(t)
}

func TestServeCtxFailuresAreRetried(t *testing.T) {
	d := startServe(t, serveOptions{nCtx: 2, nGen: 1})
	ci := d.cluster(t)
	var ctx0 string
	for _, w := range ci.Fleet {
		if w.Name == "ctx-0" {
			ctx0 = w.URL
		}
	}
	code, _, body := post(t, ctx0+"/admin/faults", `{"error_rate":1}`)
	require.Equal(t, http.StatusOK, code, string(body))
	for i := 0; i < 4; i++ {
		code, hdr, body := d.chat(t, false, fmt.Sprintf("question %d", i), "")
		require.Equal(t, http.StatusOK, code, string(body))
		require.Equal(t, "ctx-1", hdr.Get("X-Duet-Ctx-Worker"))
	}
	d.requireIdle(t)
}

func TestServeConditionalDisaggregation(t *testing.T) {
	d := startServe(t, serveOptions{nCtx: 1, nGen: 1, extra: "  max_local_prefill_tokens: 64"})
	code, hdr, body := d.chat(t, true, "short", "")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, hdr.Get("X-Duet-Route"), "+local")
	code, hdr, _ = d.chat(t, false, strings.Repeat("long prompt words ", 100), "")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, hdr.Get("X-Duet-Route"), "+local")
	d.requireIdle(t)
}

func TestServeContextFinishedKeepsContent(t *testing.T) {
	// EOS is drawn at (almost) every token on the ctx workers; the sim's
	// draws are seeded by the request, so this is deterministic: the context phase
	// finishes the request and its answer must still reach the client.
	d := startServe(t, serveOptions{nCtx: 1, nGen: 1, ctxArgs: `, "--eos-probability", "0.99999"`})
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":%t,"max_tokens":12,
		  "messages":[{"role":"user","content":"hi"}]}`, stream)
		code, hdr, out := post(t, d.url+"/v1/chat/completions", body)
		require.Equal(t, http.StatusOK, code, string(out))
		require.Contains(t, hdr.Get("X-Duet-Route"), "ctx-finished")
		require.Contains(t, string(out), `"finish_reason":"stop"`)
		if stream {
			events := sseData(out)
			require.Equal(t, "[DONE]", events[len(events)-1])
		}
	}
	d.requireIdle(t)
}

func TestServeKilledGenWorkerMidStream(t *testing.T) {
	d := startServe(t, serveOptions{nCtx: 1, nGen: 2})
	conn, reader := openStream(t, d, 4000)
	defer conn.Close()
	genWorker := readHeader(t, reader, "X-Duet-Gen-Worker")
	readEvents(t, reader, 3)
	for _, w := range d.cluster(t).Fleet {
		if w.Name == genWorker {
			require.NoError(t, syscall.Kill(w.PID, syscall.SIGKILL))
		}
	}
	rest := readUntilClosed(t, reader)
	require.NotContains(t, rest, `"error"`, "the stream went on on the other gen worker")
	require.Contains(t, rest, `"finish_reason":"length"`)
	require.True(t, strings.HasSuffix(strings.TrimSpace(rest), "data: [DONE]"))
	d.requireIdle(t)
	// The fleet marks the worker down and restarts it; the other gen worker
	// keeps serving meanwhile.
	code, _, body := d.chat(t, true, "still there?", "")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Eventually(t, func() bool {
		for _, w := range d.cluster(t).Fleet {
			if w.Name == genWorker && w.State == "up" {
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "killed worker restarted")
}

func TestServeClientDisconnectReleasesLoad(t *testing.T) {
	d := startServe(t, serveOptions{nCtx: 1, nGen: 1})
	conn, reader := openStream(t, d, 4000)
	readHeader(t, reader, "X-Duet-Gen-Worker")
	readEvents(t, reader, 3)
	require.NoError(t, conn.Close())
	d.requireIdle(t)
}

// openStream sends a raw streaming chat request with a long output, so the
// test controls the connection.
func openStream(t *testing.T, d *deployment, maxTokens int) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(d.url, "http://"))
	require.NoError(t, err)
	body := fmt.Sprintf(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"max_tokens":%d,"ignore_eos":true,"messages":[{"role":"user","content":"write a long story"}]}`, maxTokens)
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err)
	return conn, bufio.NewReader(conn)
}

func readHeader(t *testing.T, r *bufio.Reader, name string) string {
	t.Helper()
	value := ""
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			return value
		}
		if k, v, ok := strings.Cut(line, ": "); ok && strings.EqualFold(k, name) {
			value = v
		}
	}
}

func readEvents(t *testing.T, r *bufio.Reader, n int) {
	t.Helper()
	for seen := 0; seen < n; {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		if strings.Contains(line, "data: {") {
			seen++
		}
	}
}

func readUntilClosed(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var b strings.Builder
	for {
		line, err := r.ReadString('\n')
		b.WriteString(line)
		if err != nil || strings.HasPrefix(line, "data: [DONE]") {
			return b.String()
		}
	}
}
