package router

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// turns records what a router shares.
type turns struct {
	mu  sync.Mutex
	all []Turn
}

func (s *turns) Find(string) (SessionRecord, bool, error) { return SessionRecord{}, false, nil }
func (s *turns) OnLearned(func([]string, []uint64))       {}
func (s *turns) Ended(t Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, t)
}

func TestEndedSessionIsForgottenAtOnce(t *testing.T) {
	r, _ := convRouter(t, fleet(2, 2), nil)
	shared := &turns{}
	r.ShareState(shared)
	route(t, r, req("agent-task", tokens(0, 64)))
	require.Equal(t, 1, r.Sessions())

	last, err := r.Route(req("agent-task", tokens(0, 96)))
	require.NoError(t, err)
	last.ContextDone(true, -1)
	last.End(Outcome{GenRan: true, EndSession: true})
	require.Zero(t, r.Sessions(), "the pin is released now, not after session_ttl")
	end := shared.all[len(shared.all)-1]
	require.Equal(t, "agent-task", end.Forget, "every replica forgets it")
	require.Nil(t, end.Session)
	require.NotEmpty(t, end.Workers, "what the turn left in the caches is still shared")
}
