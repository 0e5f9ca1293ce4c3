package orchestrator

// Sub-agent sessions. An agent that starts sub-agents (Claude Code's Task
// tool, OpenCode's and Codex's sub-agents, Dynamo's agent hints) names the
// parent session on the sub-agent's requests; the router starts a
// sub-agent's session on its parent's ctx worker, where their shared
// prefix is, and spreads the sub-agents' generation (router.CostModel).

// parentHeaders name a request's parent session, read in order: OpenCode's
// (x-parent-session-id, also duet's own), NVIDIA Dynamo's
// (x-dynamo-parent-session-id, lib/llm/src/protocols/agents.rs), Codex
// CLI's parent thread (x-codex-parent-thread-id).
var parentHeaders = []string{"X-Parent-Session-ID", "X-Dynamo-Parent-Session-Id", "X-Codex-Parent-Thread-Id"}

// Claude Code's agent headers, as NVIDIA Dynamo maps them
// (lib/llm/src/protocols/agents.rs): every request of a conversation
// carries its session id; a sub-agent's also carries its own agent id and
// may carry its parent agent's.
const (
	headerClaudeSession     = "X-Claude-Code-Session-Id"
	headerClaudeAgent       = "X-Claude-Code-Agent-Id"
	headerClaudeParentAgent = "X-Claude-Code-Parent-Agent-Id"
)

// agentSessions returns the request's session and parent session, given
// the session key sessionKey found. A Claude Code sub-agent (an agent id
// other than the session id) gets a session of its own under the
// conversation's, "SESSION/AGENT", whose parent is its parent agent's or,
// without one, the conversation's. Otherwise the parent is the first
// parent header's value, none when it is the session itself.
func (o *Orchestrator) agentSessions(header func(string) string, session string) (string, string, error) {
	if header == nil || session == "" {
		return session, "", nil
	}
	if root := header(headerClaudeSession); root == session {
		if agent := header(headerClaudeAgent); agent != "" && agent != root {
			return o.claudeSubAgent(header, root, agent)
		}
	}
	for _, h := range parentHeaders {
		if v := header(h); v != "" {
			parent, err := o.checkedKey(keySource{h, v})
			if err != nil || parent == session {
				return session, "", err
			}
			return session, parent, nil
		}
	}
	return session, "", nil
}

// claudeSubAgent keys Claude Code sub-agent agent of conversation root.
func (o *Orchestrator) claudeSubAgent(header func(string) string, root, agent string) (string, string, error) {
	session, err := o.checkedKey(keySource{headerClaudeAgent, root + "/" + agent})
	if err != nil {
		return "", "", err
	}
	parent := root
	if p := header(headerClaudeParentAgent); p != "" && p != root && p != agent {
		if parent, err = o.checkedKey(keySource{headerClaudeParentAgent, root + "/" + p}); err != nil {
			return "", "", err
		}
	}
	return session, parent, nil
}
