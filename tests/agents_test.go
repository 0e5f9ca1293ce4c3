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
// prompt, which holds its first answer), all start on the parent's ctx
// worker, and spread over the gen workers (the busiest has at most 1.3x
// the mean). A tree without the header runs first, for the record.
func TestSubAgentsShareTheParentsPrefix(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 2, nGen: 2})
	without := subAgentTree(t, d, "lakes", false)
	with := subAgentTree(t, d, "rivers", true)
	t.Logf("without the parent header: %s", without)
	t.Logf("with it: %s", with)
	require.Equal(t, 8, with.onParentCtx, "every sub-agent on the parent's ctx worker")
	require.GreaterOrEqual(t, with.children, with.alone-0.05)
	busiest := 0
	for _, n := range with.gens {
		busiest = max(busiest, n)
	}
	require.LessOrEqual(t, float64(busiest)/(8.0/2), 1.3, "gen imbalance: %v", with.gens)
}

// tree is what one tree of sub-agents measured.
type tree struct {
	alone, children float64 // hit ratios: the parent's second turn, the sub-agents' first turns (mean)
	onParentCtx     int     // sub-agents whose first turn ran on the parent's ctx worker
	gens            map[string]int
}

func (tr tree) String() string {
	return fmt.Sprintf("hit ratio: parent's next turn %.3f, sub-agents' first turns %.3f; %d of 8 on the parent's ctx worker; gen workers %v",
		tr.alone, tr.children, tr.onParentCtx, tr.gens)
}

// subAgentTree runs a parent session about topic for two turns, then 8
// sub-agents started from its first turn, naming their parent when
// parentHeader is set.
func subAgentTree(t *testing.T, d *deployment, topic string, parentHeader bool) tree {
	t.Helper()
	root := []message{{Role: "system", Content: systemPrompt},
		{Role: "user", Content: fmt.Sprintf("Plan a survey of the %s of Europe, part by part, for several researchers.", topic)}}
	first := converse(t, d, root, "X-Session-ID", topic)
	require.Equal(t, http.StatusOK, first.status)
	root = append(root, message{Role: "assistant", Content: first.reply})
	next := converse(t, d, append(root, message{Role: "user", Content: "Now list the researchers' roles."}), "X-Session-ID", topic)
	require.Equal(t, http.StatusOK, next.status)
	tr := tree{alone: hitRatio(next), gens: map[string]int{}}
	for i := range 8 {
		task := append(append([]message(nil), root...), message{Role: "user",
			Content: fmt.Sprintf("You are researcher %d: survey %s basin number %d and report.", i, topic, i)})
		headers := []string{"X-Session-ID", fmt.Sprintf("%s-agent-%d", topic, i)}
		if parentHeader {
			headers = append(headers, "X-Parent-Session-ID", topic)
		}
		child := converse(t, d, task, headers...)
		require.Equal(t, http.StatusOK, child.status)
		if child.ctx == first.ctx {
			tr.onParentCtx++
		}
		tr.children += hitRatio(child) / 8
		tr.gens[child.gen]++
	}
	return tr
}

func hitRatio(turn chatTurn) float64 {
	return float64(turn.usage.cached()) / float64(turn.usage.PromptTokens)
}
