package chattemplate

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer/internal/reftest"
)

// benchConversation is a system message and 20 user/assistant turns of
// about 60 and 120 words.
func benchConversation() Conversation {
	msgs := []Message{{Role: "system", Content: Text("You are a helpful assistant. Answer briefly and cite sources.")}}
	for i := range 20 {
		msgs = append(msgs,
			Message{Role: "user", Content: Text(fmt.Sprintf("Question %d: %s", i, texts[14]))},
			Message{Role: "assistant", Content: Text(fmt.Sprintf("Answer %d: %s\n%s", i, texts[14], texts[16]))})
	}
	msgs = append(msgs, Message{Role: "user", Content: Text("And finally?")})
	return Conversation{Messages: msgs, AddGenerationPrompt: true}
}

// BenchmarkRender renders a 20-turn conversation with each reference
// model's template:
//
//	go test ./tokenizer/chattemplate/ -run '^$' -bench Render -benchmem
func BenchmarkRender(b *testing.B) {
	conv := benchConversation()
	for _, model := range []string{"llama3_1", "qwen3", "deepseek_v3", "gemma3"} {
		b.Run(model, func(b *testing.B) {
			dir, err := filepath.Abs(reftest.ModelDir(model))
			require.NoError(b, err)
			tmpl, err := Load(dir, "")
			if err != nil {
				b.Skipf("reference model files not installed (run `make reference`): %v", err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tmpl.Render(conv); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
