package orchestrator

import (
	"testing"

	"github.com/duet-serve/duet/router"

	"github.com/stretchr/testify/require"
)

func TestRouteKindKeepsTheLabelBounded(t *testing.T) {
	for decision, kind := range map[string]string{
		"sticky": "sticky", "implicit+local": "implicit", "fork": "fork", "spill:ctx-overload": "spill", "new": "new",
		"least-load": "least-load", "hash+ctx-finished": "hash", "something-else": "other", "": "other",
	} {
		require.Equal(t, kind, router.DecisionKind(decision), decision)
	}
	m, err := newMetrics(nil, nil, nil)
	require.NoError(t, err)
	for _, k := range append(router.DecisionKinds, "other") {
		require.NotNil(t, m.byRoute[k], k)
	}
	require.NotNil(t, m.ttftByRoute("spill:gen-overload"))
}
