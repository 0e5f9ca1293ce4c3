package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// streamedAnswer is what a client reads from one chat or completions
// stream.
type streamedAnswer struct {
	ids        map[string]bool
	created    map[int64]bool
	text       strings.Builder
	roles      int // deltas that carry a role
	contentEvs int
	finish     []string
	usage      *usage
	errors     []string
	done       int
}

func readStream(t *testing.T, body []byte) streamedAnswer {
	t.Helper()
	a := streamedAnswer{ids: map[string]bool{}, created: map[int64]bool{}}
	for _, data := range sseData(body) {
		if data == "[DONE]" {
			a.done++
			continue
		}
		var ev struct {
			ID      string          `json:"id"`
			Created int64           `json:"created"`
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		require.NoError(t, json.Unmarshal([]byte(data), &ev), data)
		if ev.Error != nil {
			a.errors = append(a.errors, string(ev.Error))
			continue
		}
		a.ids[ev.ID], a.created[ev.Created] = true, true
		for _, c := range ev.Choices {
			if c.Delta.Role != "" {
				a.roles++
			}
			text := c.Text + c.Delta.Content
			if text != "" {
				a.contentEvs++
				a.text.WriteString(text)
			}
			if c.FinishReason != nil {
				a.finish = append(a.finish, *c.FinishReason)
			}
		}
		if ev.Usage != nil {
			a.usage = ev.Usage
		}
	}
	return a
}

// requireWhole checks one well-formed stream of want tokens: one id, one
// created time, one role, one finish reason, usage that adds up, no error.
func (a streamedAnswer) requireWhole(t *testing.T, want, promptTokens int, chat bool) {
	t.Helper()
	require.Empty(t, a.errors)
	require.Equal(t, 1, a.done, "one [DONE]")
	require.Len(t, a.ids, 1, "one response id")
	require.Len(t, a.created, 1, "one created time")
	if chat {
		require.Equal(t, 1, a.roles, "the role comes once")
	}
	require.Equal(t, []string{"length"}, a.finish)
	require.Equal(t, want, a.contentEvs, "one event per token")
	require.Equal(t, want, len(strings.Fields(a.text.String())), "words of the answer")
	require.NotNil(t, a.usage)
	require.Equal(t, want, a.usage.CompletionTokens)
	if promptTokens > 0 {
		require.Equal(t, promptTokens, a.usage.PromptTokens)
	}
}

// TestMigrateGenerationMidStream kills the stream of one of two gen workers
// after 5 of 64 tokens: every answer still arrives whole, in one stream.
func TestMigrateGenerationMidStream(t *testing.T) {
	for _, proto := range []string{"trtllm", "vllm", "sglang"} {
		t.Run(proto, func(t *testing.T) {
			d := startServe(t, serveOptions{protocol: proto})
			code, _, body := post(t, d.workerURL(t, "gen-0")+"/admin/faults", `{"die_rate":1,"die_after_tokens":5}`)
			require.Equal(t, http.StatusOK, code, string(body))
			prompt := map[bool]int{}
			for _, chat := range []bool{true, false} {
				for i := 0; i < 4; i++ { // round robin: half of them start on gen-0
					body := fmt.Sprintf(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"max_tokens":64,"ignore_eos":true,
					  "stream_options":{"include_usage":true},%s}`, promptField(chat, fmt.Sprintf("question %d about migration", i)))
					path := map[bool]string{true: "/v1/chat/completions", false: "/v1/completions"}[chat]
					code, _, out := post(t, d.url+path, body)
					require.Equal(t, http.StatusOK, code, string(out))
					a := readStream(t, out)
					if prompt[chat] == 0 && a.usage != nil {
						prompt[chat] = a.usage.PromptTokens
					}
					a.requireWhole(t, 64, prompt[chat], chat)
				}
			}
			require.GreaterOrEqual(t, d.metricWith(t, "duet_migrations_total", `outcome="migrated"`), 4.0)
			d.requireIdle(t)
		})
	}
}

// promptField is a chat's messages or a completion's prompt.
func promptField(chat bool, text string) string {
	if chat {
		return fmt.Sprintf(`"messages":[{"role":"user","content":%q}]`, text)
	}
	return fmt.Sprintf(`"prompt":%q`, text)
}

// metricWith sums a metric's samples whose labels contain labels.
func (d *deployment) metricWith(t *testing.T, name, labels string) float64 {
	t.Helper()
	sum := 0.0
	require.NoError(t, scrape(d.url+"/metrics", func(n, l string, v float64) {
		if n == name && strings.Contains(l, labels) {
			sum += v
		}
	}))
	return sum
}

// TestMigrateNonStreaming: a gen worker that dies mid-answer fails a
// non-streaming request before anything reached the client (the engines
// send a non-streaming answer whole), so the answer is generated again on
// another gen worker.
func TestMigrateNonStreaming(t *testing.T) {
	for _, proto := range []string{"trtllm", "vllm", "sglang"} {
		t.Run(proto, func(t *testing.T) {
			d := startServe(t, serveOptions{protocol: proto})
			code, _, body := post(t, d.workerURL(t, "gen-0")+"/admin/faults", `{"die_rate":1,"die_after_tokens":5}`)
			require.Equal(t, http.StatusOK, code, string(body))
			for i := 0; i < 4; i++ {
				code, hdr, out := d.chat(t, false, fmt.Sprintf("question %d", i), `,"max_tokens":64`)
				require.Equal(t, http.StatusOK, code, string(out))
				require.Equal(t, "gen-1", hdr.Get("X-Duet-Gen-Worker"))
				var r struct {
					Choices []struct {
						Message struct{ Content string } `json:"message"`
					} `json:"choices"`
					Usage usage `json:"usage"`
				}
				require.NoError(t, json.Unmarshal(out, &r))
				require.Equal(t, 64, r.Usage.CompletionTokens)
				require.Len(t, strings.Fields(r.Choices[0].Message.Content), 64)
			}
			d.requireIdle(t)
		})
	}
}

// slowSims makes every sim token take 40 ms (2 s at the tests' time
// scale of 0.02), so that a stream is still running when a test acts on
// its worker.
const slowSims = `, "--itl-base", "2s"`

// openSlowStream sends a streaming chat request of 64 tokens and returns the
// response once its first event has arrived, with that event read.
func openSlowStream(t *testing.T, d *deployment, content string) (*http.Response, *bufio.Reader, []byte) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"max_tokens":64,"ignore_eos":true,
	  "stream_options":{"include_usage":true},"messages":[{"role":"user","content":%q}]}`, content)
	resp, err := streamClient.Post(d.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	r := bufio.NewReader(resp.Body)
	var read []byte
	for !strings.Contains(string(read), "\n\n") {
		line, err := r.ReadBytes('\n')
		require.NoError(t, err)
		read = append(read, line...)
	}
	return resp, r, read
}

// streamClient gives up on a request after a minute: far beyond health
// detection plus a normal request, far below the tests' five-minute
// worker timeouts.
var streamClient = &http.Client{Timeout: time.Minute}

// pidOf returns the pid of fleet worker name.
func (d *deployment) pidOf(t *testing.T, name string) int {
	t.Helper()
	for _, w := range d.cluster(t).Fleet {
		if w.Name == name {
			return w.PID
		}
	}
	t.Fatalf("no fleet worker %s", name)
	return 0
}

// leftHung is a restart policy that leaves an unhealthy worker running,
// as a worker duet did not launch is: only duet's routing reacts to it.
const leftHung = "{attempts: 0}"

// stopWorker SIGSTOPs a fleet worker (hung, not dead) until the test ends.
func (d *deployment) stopWorker(t *testing.T, name string) {
	t.Helper()
	pid := d.pidOf(t, name)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
}

// TestHungGenWorkerStreamMigrates: a gen worker that stops answering in the
// middle of a stream (SIGSTOP) costs its health detection time, not the
// five-minute idle timeout: the stream continues on the other gen worker.
func TestHungGenWorkerStreamMigrates(t *testing.T) {
	for _, proto := range []string{"trtllm", "vllm", "sglang"} {
		t.Run(proto, func(t *testing.T) {
			d := startServe(t, serveOptions{protocol: proto, timeout: "5m", simArgs: slowSims, restart: leftHung})
			resp, rest, first := openSlowStream(t, d, "a question for a worker about to hang")
			d.stopWorker(t, resp.Header.Get("X-Duet-Gen-Worker"))
			tail, err := io.ReadAll(rest)
			require.NoError(t, err, "the answer ends within the client's minute")
			readStream(t, append(first, tail...)).requireWhole(t, 64, 0, true)
			require.GreaterOrEqual(t, d.metricWith(t, "duet_migrations_total", `outcome="migrated",reason="worker_down"`), 1.0)
		})
	}
}

// TestHungCtxWorkerPrefillRetried: requests waiting on a ctx worker that
// stopped answering (SIGSTOP) are retried on the other one as soon as its
// health check finds it down, not after the five-minute context timeout.
func TestHungCtxWorkerPrefillRetried(t *testing.T) {
	d := startServe(t, serveOptions{protocol: "vllm", timeout: "5m", restart: leftHung})
	d.stopWorker(t, "ctx-0")
	var wg sync.WaitGroup
	codes := make([]int, 6)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":8,"messages":[{"role":"user","content":"hung %d"}]}`, i)
			resp, err := streamClient.Post(d.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				return // codes[i] stays 0: the client gave up
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	for i, code := range codes {
		require.Equal(t, http.StatusOK, code, "request %d", i)
	}
}

// TestDrainWithMigrationMovesStreams: draining a gen worker with migrate
// moves its stream in flight to the other gen worker; the client gets one
// whole answer.
func TestDrainWithMigrationMovesStreams(t *testing.T) {
	for _, proto := range []string{"trtllm", "vllm", "sglang"} {
		t.Run(proto, func(t *testing.T) {
			d := startServe(t, serveOptions{protocol: proto, simArgs: slowSims, adminToken: "s3cret"})
			resp, rest, first := openSlowStream(t, d, "a question for a worker about to be drained")
			gen := resp.Header.Get("X-Duet-Gen-Worker")
			require.Equal(t, http.StatusOK, adminCall(t, http.MethodPost, d.url+"/admin/workers/"+gen+"/drain", "s3cret", `{"migrate":true}`))
			tail, err := io.ReadAll(rest)
			require.NoError(t, err)
			readStream(t, append(first, tail...)).requireWhole(t, 64, 0, true)
			require.GreaterOrEqual(t, d.metricWith(t, "duet_migrations_total", `outcome="migrated",reason="worker_down"`), 1.0)
			d.requireIdle(t)
		})
	}
}

// TestFailedKVPullRedone: a gen worker that reports its KV pull failed, as
// each engine reports it (vLLM: a role chunk, then an error event; SGLang:
// an error event; TensorRT-LLM: a cut stream, or a 400 when not
// streaming), costs the client nothing: the prefill is redone and the
// answer comes whole.
func TestFailedKVPullRedone(t *testing.T) {
	for _, proto := range []string{"trtllm", "vllm", "sglang"} {
		t.Run(proto, func(t *testing.T) {
			d := startServe(t, serveOptions{protocol: proto})
			code, _, body := post(t, d.workerURL(t, "gen-0")+"/admin/faults", `{"kv_pull_fail_rate":1}`)
			require.Equal(t, http.StatusOK, code, string(body))
			for i := 0; i < 4; i++ {
				for _, stream := range []bool{true, false} {
					extra := `,"max_tokens":16`
					if stream {
						extra += `,"stream_options":{"include_usage":true}`
					}
					code, hdr, out := d.chat(t, stream, fmt.Sprintf("pull %d", i), extra)
					require.Equal(t, http.StatusOK, code, string(out))
					if stream { // its headers may name gen-0: vLLM's role chunk came first
						readStream(t, out).requireWhole(t, 16, 0, true)
						continue
					}
					require.Equal(t, "gen-1", hdr.Get("X-Duet-Gen-Worker"))
					var r struct{ Usage usage }
					require.NoError(t, json.Unmarshal(out, &r))
					require.Equal(t, 16, r.Usage.CompletionTokens)
				}
			}
			d.requireIdle(t)
		})
	}
}

// TestSessionEndReleasesThePin: X-Session-End on a session's last request
// releases its pin when the request ends.
func TestSessionEndReleasesThePin(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 1, nGen: 1})
	sessions := func() int {
		var ci struct {
			Sessions int `json:"sessions"`
		}
		require.Equal(t, http.StatusOK, getJSON(t, d.url+"/cluster_info", &ci))
		return ci.Sessions
	}
	code, _, body := d.chat(t, false, "first step of the task", "", "X-Session-ID", "task-1")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, 1, sessions())
	code, _, body = d.chat(t, false, "last step of the task", "", "X-Session-ID", "task-1", "X-Session-End", "1")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Zero(t, sessions())
}
