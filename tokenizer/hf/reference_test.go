package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer/internal/reftest"
)

// refResult is one line of tests/reference/encode.mjs's output.
type refResult struct {
	Rust        []int  `json:"rust"`
	RustSpecial []int  `json:"rust_special"`
	Decoded     string `json:"decoded"`
	JS          []int  `json:"js"`
	JSSpecial   []int  `json:"js_special"`
	JSError     string `json:"js_error"`
}

// reference runs encode.mjs on the corpus for model, once per test binary.
var reference sync.Map // model -> func() ([]refResult, error)

func referenceResults(t *testing.T, model string) []refResult {
	t.Helper()
	requireReference(t)
	f, _ := reference.LoadOrStore(model, sync.OnceValues(func() ([]refResult, error) {
		return nodeEncode(reftest.ModelDir(model), corpusPath)
	}))
	res, err := f.(func() ([]refResult, error))()
	require.NoError(t, err, "node encode.mjs %s", model)
	return res
}

// runReference runs encode.mjs on the tokenizer in dir and a corpus file.
func runReference(t *testing.T, dir, corpus string) []refResult {
	t.Helper()
	res, err := nodeEncode(dir, corpus)
	require.NoError(t, err, "node encode.mjs %s", dir)
	return res
}

func nodeEncode(dir, corpus string) ([]refResult, error) {
	corpus, _ = filepath.Abs(corpus)
	cmd := exec.Command("node", filepath.Join(reftest.Dir(), "encode.mjs"), dir, corpus)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr.Bytes())
	}
	var res []refResult
	for line := range bytes.Lines(out) {
		var r refResult
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, err
		}
		res = append(res, r)
	}
	return res, nil
}

// TestMatchesReference requires Encode, EncodeWithSpecial and Decode to
// give what Hugging Face's Rust tokenizers give for every string of the
// corpus, with each of the four models; it logs where tokenizers.js
// disagrees with Rust (duet follows Rust, which the engines run).
func TestMatchesReference(t *testing.T) {
	texts := readCorpus(t)
	for _, model := range models {
		t.Run(model, func(t *testing.T) {
			requireReference(t)
			// Start node while the tokenizer loads.
			done := make(chan []refResult, 1)
			go func() { done <- referenceResults(t, model) }()
			tok := loadModel(t, model)
			refs := <-done
			require.Len(t, refs, len(texts))
			bad, badSpecial, badDecode, jsDiff := 0, 0, 0, 0
			for i, text := range texts {
				r := refs[i]
				got := tok.Encode(text)
				if !slices.Equal(got, r.Rust) {
					if bad++; bad <= 5 {
						t.Errorf("Encode(%q)\n got %v\nwant %v", clip(text), clipIDs(got), clipIDs(r.Rust))
					}
				}
				if gs := tok.EncodeWithSpecial(text); !slices.Equal(gs, r.RustSpecial) {
					if badSpecial++; badSpecial <= 5 {
						t.Errorf("EncodeWithSpecial(%q)\n got %v\nwant %v", clip(text), clipIDs(gs), clipIDs(r.RustSpecial))
					}
				}
				if d := tok.Decode(r.Rust); d != r.Decoded {
					if badDecode++; badDecode <= 5 {
						t.Errorf("Decode(ids of %q)\n got %q\nwant %q", clip(text), clip(d), clip(r.Decoded))
					}
				}
				if !slices.Equal(r.JS, r.Rust) || !slices.Equal(r.JSSpecial, r.RustSpecial) {
					jsDiff++
					t.Logf("tokenizers.js differs from Rust on %q: js %v, rust %v %s", clip(text), clipIDs(r.JS), clipIDs(r.Rust), r.JSError)
				}
			}
			t.Logf("%s: %d strings; mismatches: Encode %d, EncodeWithSpecial %d, Decode %d; tokenizers.js differs from Rust on %d",
				model, len(texts), bad, badSpecial, badDecode, jsDiff)
		})
	}
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// clipIDs returns the start of a long list of ids and where it first
// differs from the reference, if it does.
func clipIDs(ids []int) []int {
	if len(ids) > 40 {
		return ids[:40]
	}
	return ids
}
