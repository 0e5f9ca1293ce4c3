package hf

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer/internal/reftest"
)

// TestTiktokenMatchesTokenizerJSON writes Llama 3.1's vocabulary as a
// tiktoken file and requires the same ids as its tokenizer.json on the
// corpus.
func TestTiktokenMatchesTokenizerJSON(t *testing.T) {
	ref := loadModel(t, "llama3_1")
	var b strings.Builder
	for id, tok := range ref.model.tokens {
		raw, ok := fromByteLevel(tok)
		require.True(t, ok, tok)
		fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString([]byte(raw)), id)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.model"), []byte(b.String()), 0o644))
	cfg, err := os.ReadFile(filepath.Join(reftest.ModelDir("llama3_1"), "tokenizer_config.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644))
	tok, err := Load(dir)
	require.NoError(t, err)
	require.Equal(t, ref.VocabSize(), tok.VocabSize())
	for _, text := range readCorpus(t) {
		require.Equal(t, ref.Encode(text), tok.Encode(text), "%q", clip(text))
		require.Equal(t, ref.EncodeWithSpecial(text), tok.EncodeWithSpecial(text), "%q", clip(text))
	}
	ids := tok.Encode("héllo <|eot_id|>")
	require.Equal(t, ref.Decode(ids), tok.Decode(ids))

	// Without tokenizer_config.json: Meta's Llama 3.1 special tokens.
	require.NoError(t, os.Remove(filepath.Join(dir, "tokenizer_config.json")))
	bare, err := Load(filepath.Join(dir, "tokenizer.model"))
	require.NoError(t, err)
	id, ok := bare.TokenID("<|python_tag|>")
	require.True(t, ok)
	require.Equal(t, 128010, id)
	require.True(t, slices.Equal([]int{128000, 128009}, bare.EncodeWithSpecial("<|eot_id|>")))
}
