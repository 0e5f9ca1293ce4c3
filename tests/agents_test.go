package tests

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A tree of 8 sub-agents under one parent session: each sub-agent starts
// with the parent's conversation so far and a task of its own, and names
// its parent (X-Parent-Session-ID). They reuse the parent's cached prefix
// at least as well as the parent's own next turn does, less 0.05 (they
// reuse more: by then the ctx worker also holds the parent's second
// prompt, which holds its first answer), and spread over the gen workers
// (the busiest has at most 1.3x the mean).
func TestSubAgentsShareTheParentsPrefix(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 2, nGen: 2})
	root := []message{{Role: "system", Content: systemPrompt},
		{Role: "user", Content: "Plan a survey of the rivers of Europe, part by part, for several researchers."}}
	first := converse(t, d, root, "X-Session-ID", "root")
	require.Equal(t, http.StatusOK, first.status)
	root = append(root, message{Role: "assistant", Content: first.reply})

	next := converse(t, d, append(root, message{Role: "user", Content: "Now list the researchers' roles."}), "X-Session-ID", "root")
	require.Equal(t, http.StatusOK, next.status)
	alone := hitRatio(next)

	gens := map[string]int{}
	sum := 0.0
	for i := range 8 {
		task := append(append([]message(nil), root...), message{Role: "user",
			Content: fmt.Sprintf("You are researcher %d: survey river basin number %d and report.", i, i)})
		child := converse(t, d, task, "X-Session-ID", fmt.Sprintf("root-agent-%d", i), "X-Parent-Session-ID", "root")
		require.Equal(t, http.StatusOK, child.status)
		require.Equal(t, "parent", child.route, "agent %d", i)
		require.Equal(t, first.ctx, child.ctx, "the parent's ctx worker")
		sum += hitRatio(child)
		gens[child.gen]++
	}
	t.Logf("hit ratio: parent's next turn %.3f, sub-agents' first turns %.3f; gen workers %v", alone, sum/8, gens)
	require.GreaterOrEqual(t, sum/8, alone-0.05)
	busiest := 0
	for _, n := range gens {
		busiest = max(busiest, n)
	}
	require.LessOrEqual(t, float64(busiest)/(8.0/2), 1.3, "gen imbalance: %v", gens)
}

func hitRatio(turn chatTurn) float64 {
	return float64(turn.usage.cached()) / float64(turn.usage.PromptTokens)
}
