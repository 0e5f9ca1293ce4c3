package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readTestdata returns the contents of testdata/name.
func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return string(b)
}

// fixtureChat is a typical chat: a system prompt, multilingual and code
// turns, a named user, an assistant tool call and its result.
func fixtureChat(t testing.TB) []ChatMessage {
	t.Helper()
	multi := strings.Split(readTestdata(t, "multilingual.txt"), "\n")
	return []ChatMessage{
		{Role: "system", Content: "You are a helpful assistant. Answer in the user's language; use Markdown."},
		{Role: "user", Content: "Translate these lines into English, keep the numbers:\n" + strings.Join(multi[:12], "\n")},
		{Role: "assistant", Content: "Here they are:\n\n1. " + strings.Join(multi[12:20], "\n1. ")},
		{Role: "user", Name: "ann_42", Content: "Thanks! Now: how do I retry an HTTP request in Go? And what's the weather in Paris?"},
		{Role: "assistant", ToolCalls: `[{"id":"call_0x1f","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]`},
		{Role: "tool", Name: "get_weather", Content: `{"city":"Paris","temp_c":17.5,"conditions":"partly cloudy","wind_kmh":12}`},
		{Role: "assistant", Content: readTestdata(t, "code.txt") + "\nIn Paris it's 17.5 °C and partly cloudy."},
		{Role: "user", Content: "   spaces before, tabs\tinside,\r\nCRLF and a trailing newline\n"},
	}
}

// fixtureTexts are the fixed texts whose token ids must never change.
func fixtureTexts(t testing.TB) map[string]string {
	t.Helper()
	return map[string]string{
		"opticks prose":     readTestdata(t, "opticks.txt"),
		"multilingual":      readTestdata(t, "multilingual.txt"),
		"markdown and code": readTestdata(t, "code.txt"),
		"typical chat":      RenderChat(fixtureChat(t)),
		"synthetic chat":    RenderChat(syntheticChat(20, 200, 1)),
		"invalid utf-8":     "ok \xff\xfe bytes \xc3( and \xe2\x82 truncated, \xf0\x9f\x98 emoji, end\x80",
	}
}
