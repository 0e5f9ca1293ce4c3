package sim

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer"
)

var (
	tokOnce sync.Map // encoding -> *tokenizer.Tokenizer
)

func testTokenizer(t testing.TB, encoding string) *tokenizer.Tokenizer {
	t.Helper()
	if v, ok := tokOnce.Load(encoding); ok {
		return v.(*tokenizer.Tokenizer)
	}
	cfg := tokenizer.Defaults()
	cfg.Encoding = encoding
	tok, err := tokenizer.New(cfg)
	require.NoError(t, err)
	v, _ := tokOnce.LoadOrStore(encoding, tok)
	return v.(*tokenizer.Tokenizer)
}

func testVocab(t testing.TB, encoding string) *vocab {
	t.Helper()
	v, err := newVocab(testTokenizer(t, encoding))
	require.NoError(t, err)
	return v
}

func sample(v *vocab, sp samplerSpec, n int) []int {
	s := newSampler(v, sp)
	out := make([]int, 0, n)
	for range n {
		id, eos := s.next()
		if eos {
			break
		}
		out = append(out, id)
	}
	return out
}

func TestVocabRoundTrips(t *testing.T) {
	for _, enc := range tokenizer.Encodings {
		t.Run(enc, func(t *testing.T) {
			v := testVocab(t, enc)
			tok := testTokenizer(t, enc)
			require.GreaterOrEqual(t, v.size(), minVocab)
			out := sample(v, samplerSpec{prompt: []int{1, 2, 3}, ignoreEOS: true}, 2000)
			require.Equal(t, out, tok.Encode(tok.Decode(out)), "a reply re-tokenizes to its own ids")
		})
	}
}

// TestReplyExtendsPromptTokens pins the property multi-turn prefix caching
// rests on: turn 2's prompt tokens start with turn 1's prompt tokens followed
// by the reply's tokens.
func TestReplyExtendsPromptTokens(t *testing.T) {
	for _, enc := range tokenizer.Encodings {
		t.Run(enc, func(t *testing.T) {
			v := testVocab(t, enc)
			tok := testTokenizer(t, enc)
			turn1 := []tokenizer.ChatMessage{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Tell me a story."}}
			p1 := encodeChat(t, tok, turn1)
			reply := sample(v, samplerSpec{prompt: p1, ignoreEOS: true}, 300)
			turn2 := append(append([]tokenizer.ChatMessage{}, turn1...),
				tokenizer.ChatMessage{Role: "assistant", Content: tok.Decode(reply)},
				tokenizer.ChatMessage{Role: "user", Content: "And then?"})
			p2 := encodeChat(t, tok, turn2)
			want := append(append([]int{}, p1...), reply...)
			require.Equal(t, want, p2[:len(want)])
		})
	}
}

func TestSamplerDeterminism(t *testing.T) {
	v := testVocab(t, "cl100k_base")
	seed := int64(7)
	base := samplerSpec{prompt: []int{10, 20, 30}, ignoreEOS: true}
	a := sample(v, base, 50)
	require.Equal(t, a, sample(v, base, 50), "same prompt, same text")

	other := base
	other.prompt = []int{10, 20, 31}
	require.NotEqual(t, a, sample(v, other, 50), "another prompt, another text")
	withSeed := base
	withSeed.reqSeed = &seed
	require.NotEqual(t, a, sample(v, withSeed, 50), "the request seed changes the text")
	worker := base
	worker.workerSeed = 3
	require.NotEqual(t, a, sample(v, worker, 50), "the worker seed changes the text")

	s := newSampler(v, base)
	s.skip(10)
	id, _ := s.next()
	require.Equal(t, a[10], id, "skip replays positions")
}

func TestSamplerEOS(t *testing.T) {
	v := testVocab(t, "cl100k_base")
	tests := []struct {
		name      string
		eosProb   float64
		minTokens int
		ignoreEOS bool
		want      int
	}{
		{"always EOS at once", 1, 0, false, 0},
		{"min_tokens delays EOS", 1, 3, false, 3},
		{"ignore_eos", 1, 0, true, 20},
		{"never EOS", 0, 0, false, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := sample(v, samplerSpec{prompt: []int{1}, eosProb: tt.eosProb, minTokens: tt.minTokens, ignoreEOS: tt.ignoreEOS}, 20)
			require.Len(t, out, tt.want)
		})
	}
}

func TestStopper(t *testing.T) {
	tests := []struct {
		name      string
		stops     []string
		minTokens int
		pieces    []string
		want      string // all emitted text
		stopped   bool
	}{
		{"no stops", nil, 0, []string{" a", " b"}, " a b", false},
		{"stop inside a piece", []string{"b"}, 0, []string{" a", " xby"}, " a x", true},
		{"stop across pieces", []string{"lo wo"}, 0, []string{" hel", "lo", " world"}, " hel", true},
		{"held back then released", []string{"abc"}, 0, []string{" ab", " ab"}, " ab ab", false},
		{"earliest of several", []string{"z", "y"}, 0, []string{" xyz"}, " x", true},
		{"empty stop ignored", []string{""}, 0, []string{" a"}, " a", false},
		{"min_tokens defers stops", []string{"a"}, 2, []string{" a", " b", " a"}, " a b ", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newStopper(tt.stops, tt.minTokens)
			var got strings.Builder
			stopped := false
			for i, p := range tt.pieces {
				emit, s := st.add(p, i+1)
				got.WriteString(emit)
				if s {
					stopped = true
					break
				}
			}
			if !stopped {
				got.WriteString(st.rest())
			}
			require.Equal(t, tt.want, got.String())
			require.Equal(t, tt.stopped, stopped)
		})
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
