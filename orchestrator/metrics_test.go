package orchestrator

import (
	"testing"

	"github.com/duet-serve/duet/router"

	"github.com/stretchr/testify/require"
)

func TestRouteKindKeepsTheLabelBounded(t *testing.T) {
	for decision, kind := range map[string]string{
		"sticky": "sticky", "cached": "cached", "moved": "moved", "repin": "repin", "new": "new",
		"least-load": "least-load", "hash": "hash", "something-else": "other", "": "other",
	} {
		require.Equal(t, kind, router.DecisionKind(decision), decision)
	}
	m, err := newMetrics(nil, nil, nil)
	require.NoError(t, err)
	for _, k := range append(router.DecisionKinds, "other") {
		require.NotNil(t, m.byRoute[k], k)
	}
	require.NotNil(t, m.ttftByRoute("spill:gen-overload"), "an unknown name is other")
}
