package names

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHeader(t *testing.T) {
	for _, ok := range []string{"X-Tenant", "x_user", "A1"} {
		require.True(t, Header(ok), ok)
	}
	for _, bad := range []string{"", "X Tenant", "X:Y", "é", "a/b"} {
		require.False(t, Header(bad), bad)
	}
}

func TestLabel(t *testing.T) {
	require.True(t, Label("team-a.prod_1", 64, "._-"))
	require.False(t, Label("team-a.prod", 64, "_-"), "a rune not in extra")
	require.False(t, Label("", 64, ""))
	require.False(t, Label("abcd", 3, ""), "longer than max")
	require.False(t, Label("a/b", 64, "._-"))
}
