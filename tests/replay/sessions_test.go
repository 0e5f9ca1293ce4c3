package replay

import (
	"strings"
	"testing"

	"github.com/duet-serve/duet/tests/loadgen"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/stretchr/testify/require"
)

// TestDocumentPrefixIsTokenIdentical checks the document QA workload
// (--prefix-prompt-pool-size): single-turn requests over the same document
// share the block hashes of every full block the document covers, as a
// prefix cache needs, and requests over different documents share none.
func TestDocumentPrefixIsTokenIdentical(t *testing.T) {
	const blockSize = 32
	tok, err := tokenizer.New(tokenizer.Defaults())
	require.NoError(t, err)
	corpus, err := loadgen.NewCorpus(tok)
	require.NoError(t, err)
	for _, c := range []struct {
		name, endpoint string
		// header is what the prompt renders before the user's text:
		// ChatML's user message start (tokenizer/chat.go) or nothing.
		header string
	}{
		{"chat", loadgen.EndpointChat, "<|im_start|>user\n"},
		{"completions", loadgen.EndpointCompletions, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := loadgen.Defaults()
			cfg.Model, cfg.EndpointType, cfg.SessionHeader, cfg.Seed, cfg.SeedSet = "m", c.endpoint, "none", 3, true
			cfg.NumSessions, cfg.ISL, cfg.OSL = 40, 100, 20
			cfg.PrefixPromptPoolSize, cfg.PrefixPromptLength, cfg.PrefixPromptLengthStddev = 4, 2000, 600
			wl, sessions, err := loadgen.Workload(cfg, corpus)
			require.NoError(t, err)
			docs := loadgen.PrefixPrompts(wl, corpus)
			require.Len(t, docs, 4)
			docBlocks := make([]int, len(docs)) // full blocks the document covers in a prompt
			for d, doc := range docs {
				docBlocks[d] = len(tok.Encode(c.header+doc)) / blockSize
				require.Greater(t, docBlocks[d], 10)
			}

			doc := make([]int, len(sessions))
			hashes := make([][]uint64, len(sessions))
			for i, s := range ChatSessions(sessions, tok, corpus, wl.EndpointType, wl.Seed) {
				require.Equal(t, 1, s.Turns())
				text := sessions[i].Turns[0].Text
				doc[i] = -1
				for d := range docs {
					if strings.HasPrefix(text, docs[d]+" ") {
						doc[i] = d
					}
				}
				require.NotEqual(t, -1, doc[i], "request %d starts with a document", i)
				hashes[i] = tokenizer.BlockHashes(s.Prompt(0), blockSize)
				require.Greater(t, len(hashes[i]), docBlocks[doc[i]], "the question follows the document")
			}
			pairs := 0
			for i := range sessions {
				for j := i + 1; j < len(sessions); j++ {
					if doc[i] != doc[j] {
						require.NotEqual(t, hashes[i][0], hashes[j][0], "requests %d and %d: different documents share no block", i, j)
						continue
					}
					n := docBlocks[doc[i]]
					require.Equal(t, hashes[i][:n], hashes[j][:n], "requests %d and %d over document %d", i, j, doc[i])
					pairs++
				}
			}
			require.Greater(t, pairs, 100, "requests over the same document were compared")
		})
	}
}
