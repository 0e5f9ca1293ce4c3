package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

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
	require.Equal(t, promptTokens, a.usage.PromptTokens)
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
