package loadgen

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func load(t *testing.T, name, typ string) []*Session {
	t.Helper()
	_, corpus := testDeps(t)
	sessions, err := LoadInputFile("testdata/"+name, typ, corpus, 512, 1)
	require.NoError(t, err)
	return sessions
}

func TestLoadMultiTurn(t *testing.T) {
	s := load(t, "multi_turn.jsonl", DatasetMultiTurn)
	require.Len(t, s, 3)

	travel := s[0]
	require.Equal(t, "travel", travel.ID)
	require.Equal(t, "You are a travel agent.", travel.System, "a leading system turn is the system prompt")
	require.False(t, travel.Stateless)
	require.Equal(t, []Turn{
		{Text: "I want to visit Lisbon.", MaxTokens: 12},
		{Text: "Which month is best?", MaxTokens: 8, Delay: 1500 * time.Millisecond},
		{Text: "Book a hotel\nnear the river.", Delay: 250 * time.Millisecond},
	}, travel.Turns)

	numeric := s[1]
	require.Equal(t, "42", numeric.ID, "numeric session ids are kept as written")
	require.True(t, numeric.Turns[0].HasTimestamp)
	require.Equal(t, time.Second, numeric.Turns[0].Timestamp)
	require.Equal(t, 5*time.Second, numeric.Turns[1].Timestamp)
	require.Equal(t, 16, numeric.Turns[1].MaxTokens)
	tok, _ := testDeps(t)
	require.InDelta(t, 40, tok.Count(numeric.Turns[1].Text), 3, "input_length without text is cut from the corpus")

	require.Equal(t, "line-4", s[2].ID, "a session without id is named after its line")
	require.Equal(t, "first part\nsecond part", s[2].Turns[0].Text)
}

func TestLoadSingleTurnGroupsSessions(t *testing.T) {
	s := load(t, "single_turn.jsonl", DatasetSingleTurn)
	require.Len(t, s, 3)
	require.Equal(t, "What is the capital of France?", s[0].Turns[0].Text)
	require.Equal(t, 10, s[0].Turns[0].MaxTokens)

	s1 := s[1]
	require.Equal(t, "s1", s1.ID)
	require.Len(t, s1.Turns, 3, "rows sharing a session_id are its turns, in file order")
	require.Equal(t, []string{"Tell me about whales.", "How long do they live?", "And what do they eat?"},
		[]string{s1.Turns[0].Text, s1.Turns[1].Text, s1.Turns[2].Text})
	require.Equal(t, 2*time.Second, s1.Turns[1].Delay)
	require.Equal(t, 20, s1.Turns[1].MaxTokens)
	require.Equal(t, 500*time.Millisecond, s1.Turns[2].Delay)

	require.Equal(t, 300*time.Millisecond, s[2].Turns[0].Timestamp)
	require.NotEmpty(t, s[2].Turns[0].Text)
}

func TestLoadMooncakeHashIDs(t *testing.T) {
	s := load(t, "mooncake_trace.jsonl", DatasetMooncake)
	require.Len(t, s, 4, "three single requests and one two-turn session")
	tok, _ := testDeps(t)
	for _, sess := range s {
		require.True(t, sess.Stateless, "a mooncake row is a whole prompt")
	}
	a, b, c := s[0].Turns[0], s[1].Turns[0], s[2].Turns[0]
	require.Equal(t, 52, a.MaxTokens)
	require.Equal(t, 10535*time.Millisecond, b.Timestamp)
	ta, tb, tc := tok.Encode(a.Text), tok.Encode(b.Text), tok.Encode(c.Text)
	require.InDelta(t, 655, len(ta), 4)
	require.InDelta(t, 672, len(tb), 4)
	require.InDelta(t, 1100, len(tc), 4)
	// Equal hash ids give equal text: [46 47] and [46 47] share ~655 tokens,
	// [46 48 49] shares block 46 only.
	require.GreaterOrEqual(t, commonPrefix(ta, tb), 650)
	require.GreaterOrEqual(t, commonPrefix(ta, tc), 505)
	require.Less(t, commonPrefix(ta, tc), 530)

	conv := s[3]
	require.Equal(t, "conv-1", conv.ID)
	require.Len(t, conv.Turns, 2)
	require.Equal(t, 2*time.Second, conv.Turns[1].Delay)
	require.GreaterOrEqual(t, commonPrefix(tok.Encode(conv.Turns[0].Text), tok.Encode(conv.Turns[1].Text)), 295)
}

func TestLoadInputErrorsNameTheLine(t *testing.T) {
	_, corpus := testDeps(t)
	_, err := LoadInputFile("testdata/bad_multi_turn.jsonl", DatasetMultiTurn, corpus, 512, 1)
	require.ErrorContains(t, err, "bad_multi_turn.jsonl:2: turns[0]")
	_, err = LoadInputFile("testdata/single_turn.jsonl", DatasetMultiTurn, corpus, 512, 1)
	require.ErrorContains(t, err, `single_turn.jsonl:1: multi_turn: "turns" is missing`)
	_, err = LoadInputFile("testdata/missing.jsonl", DatasetMultiTurn, corpus, 512, 1)
	require.Error(t, err)
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
