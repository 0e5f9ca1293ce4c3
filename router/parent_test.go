package router

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Sub-agents of one parent start on the parent's ctx worker, where their
// shared prefix is, spread over the gen workers, and keep their own pins
// from then on.
func TestSubAgentsShareTheParentsCtxWorker(t *testing.T) {
	r, _ := costRouter(t, PolicyConversation, 4, 4, nil)
	shared := seq(3000, 0)
	parent := route(t, r, request("root", append(shared, 1, 2, 3)))
	gens := map[string]int{}
	for i := range 8 {
		rq := request(fmt.Sprintf("agent-%d", i), append(shared, seq(200, 10000*(i+1))...))
		rq.ParentSession = "root"
		child, err := r.Route(rq)
		require.NoError(t, err)
		require.Equal(t, DecisionParent, child.Decision, "agent %d", i)
		require.Equal(t, parent.Ctx.Endpoint().ID, child.Ctx.Endpoint().ID)
		gens[child.Gen.Endpoint().ID]++ // the children run at once: each sees the others' gen load
		defer func() { child.ContextDone(true, -1); child.End(Outcome{GenRan: true}) }()
	}
	require.Len(t, gens, 4, "spread over every gen worker: %v", gens)
	for id, n := range gens {
		require.Equal(t, 2, n, id)
	}
	require.Empty(t, r.Stats().Breaks(), "no pin was broken")
}

func TestSubAgentFollowUpSticksToItsOwnPair(t *testing.T) {
	r, _ := costRouter(t, PolicyConversation, 2, 2, nil)
	shared := seq(2000, 0)
	route(t, r, request("root", shared))
	rq := request("agent", append(shared, seq(100, 50000)...))
	rq.ParentSession = "root"
	first := route(t, r, rq)
	require.Equal(t, DecisionParent, first.Decision)
	next := request("agent", append(shared, seq(300, 50000)...))
	next.ParentSession = "root"
	second := route(t, r, next)
	require.Equal(t, DecisionSticky, second.Decision, "its own pin now")
	require.Equal(t, first.Gen.Endpoint().ID, second.Gen.Endpoint().ID)
}

func TestUnknownParentIsANewSession(t *testing.T) {
	r, _ := costRouter(t, PolicyConversation, 2, 2, nil)
	rq := request("agent", seq(500, 0))
	rq.ParentSession = "never-seen"
	require.Equal(t, DecisionNew, route(t, r, rq).Decision)
}
