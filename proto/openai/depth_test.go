package openai

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckDepth(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		data string
		ok   bool
	}{
		{nest(8), true},
		{nest(9), false},
		{`{"a":[{"b":[{"c":[{"d":1}]}]}]}`, true},
		{`{"a":[{"b":[{"c":[{"d":[[1]]}]}]}]}`, false},
		{`["[[[[[[[[[[[[[[[[[[[[[[[[[[["]`, true},
		{`["\"[[[[[[[[[[[[[[[[[[[[[[[[[[", "\\", [[[[[[]]]]]]]`, true},
		{`["\\"[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]`, false}, // the string ends after \\
		{nest(4) + nest(4) + nest(4), true},
		{strings.Repeat("[", 9), false}, // not JSON: still refused
	} {
		err := CheckDepth([]byte(tc.data), 8)
		require.Equal(t, tc.ok, err == nil, "%s: %v", tc.data, err)
	}
}
