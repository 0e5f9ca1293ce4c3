package router

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer"
)

// Regression (issue 12, found by FuzzPrefixIndex): a prompt shared by more
// than smallSet sessions moved their set into a map, and once all but one
// had moved on, the last was never matched again: only() read the slice.
func TestPrefixIndexMatchesTheLastOfAGrownSet(t *testing.T) {
	const bs = 4
	x := newPrefixIndex(bs, 0, 0)
	shared := []int{1, 2, 3, 4}
	sessions := make([]*session, smallSet+2)
	for i := range sessions {
		sessions[i] = &session{key: fmt.Sprint("s", i)}
		x.record(sessions[i], shared, tokenizer.BlockHashes(shared, bs))
	}
	next := []int{1, 2, 3, 4, 5}
	s, _ := x.match(next, tokenizer.BlockHashes(next, bs))
	require.Nil(t, s, "ambiguous while several share the prompt")
	for _, s := range sessions[1:] {
		x.forget(s)
	}
	s, _ = x.match(next, tokenizer.BlockHashes(next, bs))
	require.Same(t, sessions[0], s)
}
