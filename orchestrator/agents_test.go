package orchestrator

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAgentSessions(t *testing.T) {
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, genStream(1, true))})
	cases := []struct {
		name            string
		headers         map[string]string
		session, parent string
	}{
		{"no parent", map[string]string{"X-Session-ID": "s"}, "s", ""},
		{"duet's and OpenCode's header", map[string]string{"X-Session-ID": "child", "X-Parent-Session-ID": "root"}, "child", "root"},
		{"Dynamo's", map[string]string{"X-Dynamo-Session-ID": "child", "X-Dynamo-Parent-Session-Id": "root"}, "child", "root"},
		{"Codex's parent thread", map[string]string{"Thread-Id": "t2", "X-Codex-Parent-Thread-Id": "t1"}, "t2", "t1"},
		{"its own parent", map[string]string{"X-Session-ID": "s", "X-Parent-Session-ID": "s"}, "s", ""},
		{"Claude Code main agent", map[string]string{headerClaudeSession: "conv"}, "conv", ""},
		{"Claude Code main agent naming itself", map[string]string{headerClaudeSession: "conv", headerClaudeAgent: "conv"}, "conv", ""},
		{"Claude Code sub-agent", map[string]string{headerClaudeSession: "conv", headerClaudeAgent: "a1"}, "conv/a1", "conv"},
		{"Claude Code nested sub-agent", map[string]string{headerClaudeSession: "conv", headerClaudeAgent: "a2", headerClaudeParentAgent: "a1"},
			"conv/a2", "conv/a1"},
		{"another session key wins over Claude Code's", map[string]string{"X-Session-ID": "s", headerClaudeSession: "conv", headerClaudeAgent: "a1"},
			"s", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := h.o.parse(Incoming{Endpoint: 1, Body: testChatBody(false, ""), Header: func(n string) string { return c.headers[n] }})
			require.NoError(t, err)
			require.Equal(t, c.session, req.SessionKey)
			require.Equal(t, c.parent, req.ParentSession)
		})
	}
	_, err := h.o.parse(Incoming{Endpoint: 1, Body: testChatBody(false, ""),
		Header: func(n string) string {
			return map[string]string{"X-Session-ID": "s", "X-Parent-Session-ID": "bad id"}[n]
		}})
	require.ErrorContains(t, err, "X-Parent-Session-ID")
}
