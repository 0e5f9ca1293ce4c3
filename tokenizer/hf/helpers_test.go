package hf

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer/internal/reftest"
)

// models are the four tokenizer files the tests compare on.
var models = []string{"llama3_1", "qwen3", "deepseek_v3", "gemma3"}

// requireReference fails the test (skips it under -short) when node or the
// reference tokenizers are missing.
func requireReference(t testing.TB) { reftest.Require(t, "@anush008/tokenizers") }

// loaded holds each model's Tokenizer, loaded once per test binary.
var loaded sync.Map // model -> func() (*Tokenizer, error)

// loadModel returns the model's Tokenizer, loading it on first use.
func loadModel(t testing.TB, model string) *Tokenizer {
	t.Helper()
	requireReference(t)
	f, _ := loaded.LoadOrStore(model, sync.OnceValues(func() (*Tokenizer, error) { return Load(reftest.ModelDir(model)) }))
	tok, err := f.(func() (*Tokenizer, error))()
	require.NoError(t, err)
	return tok
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return data
}
