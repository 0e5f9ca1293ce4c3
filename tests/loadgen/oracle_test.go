package loadgen

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer"
)

// seq returns n tokens start, start+1, ...
func seq(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

func cat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestOracleHandBuiltWorkload(t *testing.T) {
	o := NewOracle(4)
	system := seq(1000, 8)          // two blocks shared by everyone
	turn0 := cat(system, seq(0, 6)) // 14 tokens: 3 full blocks
	require.Equal(t, 0, o.Observe(turn0), "the first prompt of the run reuses nothing")

	other := cat(system, seq(500, 9))
	require.Equal(t, 8, o.Observe(other), "another session shares the system prompt's two blocks")

	turn1 := cat(turn0, seq(100, 10)) // extends turn 0
	require.Equal(t, 12, o.Observe(turn1), "a continuation reuses its previous prompt's full blocks (14 -> 12)")

	turn2 := cat(turn1, seq(200, 3))
	require.Equal(t, 24, o.Observe(turn2), "turn 1 had 24 tokens: 6 blocks")

	diverged := cat(seq(1000, 7), []int{9}, seq(0, 8))
	require.Equal(t, 4, o.Observe(diverged), "matching stops at the first differing block, and later blocks never match alone")

	require.Equal(t, 0, o.Observe(seq(1000, 3)), "a prompt shorter than a block has no full block")
	require.Equal(t, 24, o.Observe(turn2), "an identical prompt reuses all its full blocks")
}

func TestOracleOnRealPrompts(t *testing.T) {
	tok, corpus := testDeps(t)
	o := NewOracle(32)
	sess := newSynthetic(Config{ISL: 300, TurnsMean: 3, SharedSystemPromptLength: 200, UserContextPromptLength: 100},
		corpus, 1, 1, 1).all()[0]
	conv := newConversation(sess)
	var prev []int
	for k := range sess.Turns {
		msgs := conv.messages(k)
		tokens := encodeChat(t, tok, msgs)
		hit := o.Observe(tokens)
		if k > 0 {
			require.Equal(t, len(prev)/32*32, hit, "turn %d reuses every full block of turn %d's prompt", k, k-1)
		}
		prev = tokens
		conv.answered(k, "A reply of a few words.")
	}
}

// encodeChat is the tokens of msgs as a chat request's prompt, failing tb
// on an error.
func encodeChat(tb testing.TB, tok *tokenizer.Tokenizer, msgs []tokenizer.ChatMessage) []int {
	tb.Helper()
	tokens, err := tok.EncodeChat(tokenizer.Conversation(msgs))
	require.NoError(tb, err)
	return tokens
}
