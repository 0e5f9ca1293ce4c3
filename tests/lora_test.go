package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Two LoRA adapters on one model's workers, per protocol: each names its
// adapter the way its engine reads it (vLLM the adapter as model, SGLang
// "model:adapter", TensorRT-LLM lora_request). The same prompt under the
// other adapter gets no cached tokens; under its own adapter again it does.
// An adapter no worker serves is refused before any worker is called.
func TestLoRAAdaptersKeepTheirCachesApart(t *testing.T) {
	const model = "meta-llama/Llama-3.1-8B-Instruct"
	forms := map[string]func(adapter string) string{
		"vllm":   func(a string) string { return fmt.Sprintf(`"model":%q`, a) },
		"sglang": func(a string) string { return fmt.Sprintf(`"model":%q`, model+":"+a) },
		"trtllm": func(a string) string {
			return fmt.Sprintf(`"model":%q,"lora_request":{"lora_name":%q,"lora_int_id":1,"lora_path":"/adapters/%s"}`, model, a, a)
		},
	}
	for proto, form := range forms {
		t.Run(proto, func(t *testing.T) {
			d := startServe(t, serveOptions{protocol: proto, policy: "conversation", pool: "lora_adapters: [sql, chat]"})
			if proto != "trtllm" { // TensorRT-LLM lists no adapters: duet lists what its config says
				var list struct {
					Data []struct{ ID, Parent string }
				}
				require.Equal(t, http.StatusOK, getJSON(t, d.url+"/v1/models", &list))
				require.Len(t, list.Data, 3)
				require.Equal(t, "chat", list.Data[1].ID)
				require.Equal(t, model, list.Data[1].Parent)
			}
			prompt := strings.Repeat("Summarise the quarterly sales figures for every region in one table. ", 12)
			ask := func(adapter string) usage {
				body := fmt.Sprintf(`{%s,"max_tokens":4,"messages":[{"role":"user","content":%q}]}`, form(adapter), prompt)
				code, _, out := post(t, d.url+"/v1/chat/completions", body)
				require.Equal(t, http.StatusOK, code, string(out))
				var r struct{ Usage usage }
				require.NoError(t, json.Unmarshal(out, &r))
				return r.Usage
			}
			first := ask("sql")
			require.Zero(t, first.cached())
			other := ask("chat")
			require.Zero(t, other.cached(), "no credit from the other adapter's cache")
			again := ask("sql")
			require.Positive(t, again.cached(), "its own cache")
			code, _, out := post(t, d.url+"/v1/chat/completions",
				fmt.Sprintf(`{%s,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, form("code")))
			require.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound}, code, string(out))
			require.Contains(t, string(out), `code`)
		})
	}
}
