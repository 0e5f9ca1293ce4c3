package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/openai"
)

func TestStreamingShapeChat(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolTRTLLM))
	for _, usage := range []bool{true, false} {
		t.Run(fmt.Sprintf("include_usage=%v", usage), func(t *testing.T) {
			body := chatReq("stream please", map[string]any{"max_tokens": 5, "stream": true, "stream_options": map[string]any{"include_usage": usage}})
			r := post(t, w.url+"/v1/chat/completions", body)
			require.Equal(t, http.StatusOK, r.status)
			require.Equal(t, openai.ContentTypeSSE, r.header.Get("Content-Type"))
			events := sseEvents(t, r.body)
			want := 1 + 5 + 1 + 1 // role, tokens, finish, [DONE]
			if usage {
				want++
			}
			require.Len(t, events, want)
			require.True(t, openai.IsDone(events[len(events)-1]))

			chunks := make([]openai.ChatChunk, len(events)-1)
			for i, ev := range events[:len(events)-1] {
				require.NoError(t, json.Unmarshal(ev, &chunks[i]), "event %s", ev)
				require.Equal(t, openai.ObjectChatCompletionChunk, chunks[i].Object)
				require.Equal(t, chunks[0].ID, chunks[i].ID)
				require.Equal(t, Defaults().Model, chunks[i].Model)
			}
			role := chunks[0].Choices[0]
			require.Equal(t, "assistant", role.Delta.Role)
			require.Equal(t, "", *role.Delta.Content)
			require.Nil(t, role.FinishReason)
			var text strings.Builder
			for _, c := range chunks[1:6] {
				require.Len(t, c.Choices, 1)
				require.Nil(t, c.Choices[0].FinishReason)
				require.NotEmpty(t, *c.Choices[0].Delta.Content, "one token per chunk")
				require.Nil(t, c.Usage)
				text.WriteString(*c.Choices[0].Delta.Content)
			}
			final := chunks[6].Choices[0]
			require.Equal(t, openai.FinishLength, *final.FinishReason)
			require.Nil(t, final.Delta.Content)
			if usage {
				u := chunks[7]
				require.NotNil(t, u.Choices)
				require.Empty(t, u.Choices)
				require.Equal(t, 5, u.Usage.CompletionTokens)
				require.NotNil(t, u.Usage.PromptTokensDetails)
			}
			// The text equals the non-streaming answer.
			delete(body, "stream")
			delete(body, "stream_options")
			require.Equal(t, decodeChat(t, post(t, w.url+"/v1/chat/completions", body)).Choices[0].Message.Content.String(), text.String())
		})
	}
}

func TestStreamingShapeCompletion(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolVLLM))
	r := post(t, w.url+"/v1/completions", completionReq("stream please", map[string]any{"max_tokens": 3, "stream": true, "stream_options": map[string]any{"include_usage": true}}))
	events := sseEvents(t, r.body)
	require.Len(t, events, 3+1+1+1) // tokens, finish, usage, [DONE]
	for i, ev := range events[:5] {
		var c openai.CompletionChunk
		require.NoError(t, json.Unmarshal(ev, &c))
		require.Equal(t, openai.ObjectTextCompletion, c.Object)
		switch {
		case i < 3:
			require.NotEmpty(t, c.Choices[0].Text)
			require.Nil(t, c.Choices[0].FinishReason)
		case i == 3:
			require.Equal(t, openai.FinishLength, *c.Choices[0].FinishReason)
		default:
			require.Empty(t, c.Choices)
			require.Equal(t, 3, c.Usage.CompletionTokens)
		}
	}
	require.True(t, openai.IsDone(events[5]))
}

func TestStreamingHoldsBackStopStrings(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolTRTLLM))
	full := decodeChat(t, post(t, w.url+"/v1/chat/completions", chatReq("held back", map[string]any{"max_tokens": 4}))).Choices[0].Message.Content.String()
	words := strings.Fields(full)
	stop := " " + words[2]
	r := post(t, w.url+"/v1/chat/completions", chatReq("held back", map[string]any{"max_tokens": 4, "stream": true, "stop": stop}))
	text, _ := outputText(t, kindChat, r, true)
	require.Equal(t, " "+words[0]+" "+words[1], text)
	require.NotContains(t, string(r.body), words[2], "the stop text never reaches the client")
}

// TestStreamTokensArePaced checks that tokens arrive over time rather than
// in one burst (loose bounds: 20 tokens at 10 ms each take >= 100 ms).
func TestStreamTokensArePaced(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.TimeScale = 1
	cfg.ITLBase, cfg.ITLPerSeq, cfg.PrefillOverhead = 10*time.Millisecond, 0, 0
	w := startWorker(t, cfg)
	start := time.Now()
	r := post(t, w.url+"/v1/chat/completions", chatReq("pace", map[string]any{"max_tokens": 20, "stream": true}))
	require.Equal(t, http.StatusOK, r.status)
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
}

// TestClientGoneReleasesEverything reads two events of a long stream, hangs
// up, and expects the worker to notice at its next writes and release the
// sequence.
func TestClientGoneReleasesEverything(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.TimeScale = 1
	cfg.ITLBase, cfg.PrefillOverhead = 2*time.Millisecond, 0
	w := startWorker(t, cfg)
	conn, err := net.Dial("tcp", strings.TrimPrefix(w.url, "http://"))
	require.NoError(t, err)
	body, _ := json.Marshal(chatReq("long story", map[string]any{"max_tokens": 100000, "stream": true, "ignore_eos": true}))
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	for seen := 0; seen < 2; {
		line, err := br.ReadBytes('\n')
		require.NoError(t, err)
		if bytes.Contains(line, []byte("data: ")) {
			seen++
		}
	}
	require.Equal(t, 1, w.s.sched.stats().Running)
	require.NoError(t, conn.Close())
	w.requireIdle(t)
}
