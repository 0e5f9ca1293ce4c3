package orchestrator

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/protocol"
)

// Regression (issue 11): cache_salt isolates an engine's prefix cache, so
// it must isolate duet's block hashes (and so prefix matching) too.
func TestCacheSaltSeedsBlockHashes(t *testing.T) {
	h := newHarness(t, testConfig(), nil, nil)
	prompt := `"messages":[{"role":"user","content":"a long shared system prompt that spans several blocks of tokens for sure, repeated: one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"}]`
	parse := func(extra string) *Request {
		req, err := h.o.parse(Incoming{Endpoint: protocol.EndpointChat, Body: []byte(`{"model":"m",` + prompt + extra + `}`), RequestID: "r"})
		require.NoError(t, err)
		require.NotEmpty(t, req.Hashes)
		return req
	}
	plain, a1, a2, b := parse(""), parse(`,"cache_salt":"tenant-a"`), parse(`,"cache_salt":"tenant-a"`), parse(`,"cache_salt":"tenant-b"`)
	require.Equal(t, plain.Tokens, a1.Tokens, "the salt does not change the prompt")
	require.Equal(t, a1.Hashes, a2.Hashes)
	require.NotEqual(t, a1.Hashes[0], b.Hashes[0])
	require.NotEqual(t, a1.Hashes[0], plain.Hashes[0])
}
