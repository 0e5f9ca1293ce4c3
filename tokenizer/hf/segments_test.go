package hf

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A stretch served from the segment cache has the tokens of encoding it
// afresh, at the start of a text and after a special token alike (Gemma's
// Metaspace-free normalizer and Llama's byte level both).
func TestSegmentCacheIsExact(t *testing.T) {
	for _, model := range []string{"llama3_1", "gemma3"} {
		t.Run(model, func(t *testing.T) {
			tok := loadModel(t, model)
			body := strings.Repeat("The segment cache keeps whole stretches of a prompt. ", 8)
			texts := []string{body, "<bos>" + body, "<|begin_of_text|>" + body + "<|eot_id|>" + body, " " + body}
			var first [][]int
			for _, text := range texts {
				tok.segments = segmentCache{}
				first = append(first, tok.Encode(text))
			}
			for i, text := range texts {
				require.Equal(t, first[i], tok.Encode(text), "text %d served from the cache", i)
			}
		})
	}
}

// The cache keeps within its budget, oldest out first, and skips stretches
// too short or too long to be worth it.
func TestSegmentCacheIsBounded(t *testing.T) {
	var c segmentCache
	put := func(text string, first bool, ids []int) {
		if key, ok := keyOf(text, first); ok {
			c.put(key, text, ids)
		}
	}
	get := func(text string, first bool) ([]int, bool) {
		key, ok := keyOf(text, first)
		if !ok {
			return nil, false
		}
		return c.get(key, text)
	}
	ids := make([]int, 1000)
	text := strings.Repeat("x", 4096)
	for i := range 10_000 {
		put(fmt.Sprintf("%d %s", i, text), false, ids)
	}
	require.LessOrEqual(t, c.bytes, segmentBudget)
	_, ok := get(fmt.Sprintf("%d %s", 0, text), false)
	require.False(t, ok, "the oldest stretch was evicted")
	got, ok := get(fmt.Sprintf("%d %s", 9_999, text), false)
	require.True(t, ok)
	require.Len(t, got, 1000)
	_, ok = get(fmt.Sprintf("%d %s", 9_999, text), true)
	require.False(t, ok, "a stretch that starts the text is another entry")

	put("short", false, []int{1})
	_, ok = get("short", false)
	require.False(t, ok)
}
