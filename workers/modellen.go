package workers

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ModelsPath is where vLLM and SGLang servers report their context length:
// the OpenAI model list, GET /v1/models.
const ModelsPath = "/v1/models"

// modelCard is the part of a /v1/models entry ParseModelLen reads.
type modelCard struct {
	ID          string  `json:"id"`
	Parent      *string `json:"parent"`
	MaxModelLen *int    `json:"max_model_len"`
}

// ParseModelLen returns the context length a vLLM or SGLang server reports
// in its /v1/models body: the max_model_len of its base models, the
// smallest when they differ. A base model is an entry whose parent is null
// or absent; a LoRA adapter's entry names its base model as parent and has
// a null max_model_len.
//
// vLLM fills max_model_len from model_config.max_model_len on every base
// model entry since v0.5.0 (vllm-project/vllm#4643;
// vllm/entrypoints/openai/models/serving.py, show_available_models). SGLang
// fills it from tokenizer_manager.model_config.context_len since
// sgl-project/sglang#4809 (python/sglang/srt/entrypoints/http_server.py,
// available_models). TensorRT-LLM's model card has no such field.
func ParseModelLen(body []byte) (int, error) {
	var list struct {
		Data []modelCard `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return 0, fmt.Errorf("model list: %w", err)
	}
	n := 0
	for _, m := range list.Data {
		if m.Parent != nil || m.MaxModelLen == nil {
			continue
		}
		if *m.MaxModelLen < 1 {
			return 0, fmt.Errorf("model %q: max_model_len %d", m.ID, *m.MaxModelLen)
		}
		if n == 0 || *m.MaxModelLen < n {
			n = *m.MaxModelLen
		}
	}
	if n == 0 {
		return 0, errors.New("no base model with a max_model_len in the model list")
	}
	return n, nil
}

// ParseAdapters returns the LoRA adapters a vLLM or SGLang server lists in
// its /v1/models body: the entries whose parent names a base model (vLLM's
// show_available_models lists each --lora-modules adapter with its path as
// root and its base model as parent; SGLang does the same for --lora-paths
// in recent versions). An unreadable body lists none.
func ParseAdapters(body []byte) []string {
	var list struct {
		Data []modelCard `json:"data"`
	}
	if json.Unmarshal(body, &list) != nil {
		return nil
	}
	var out []string
	for _, m := range list.Data {
		if m.Parent != nil && *m.Parent != "" && m.ID != "" {
			out = append(out, m.ID)
		}
	}
	return out
}

// ValidateAdapterNames checks LoRA adapter names as duet takes them: not
// empty, without spaces or ':' (SGLang's "base:adapter" model syntax),
// each once.
func ValidateAdapterNames(names []string) error {
	seen := map[string]bool{}
	for _, n := range names {
		switch {
		case n == "" || strings.ContainsAny(n, " \t\r\n:"):
			return fmt.Errorf("%q is not an adapter name (no spaces or ':')", n)
		case seen[n]:
			return fmt.Errorf("%q is listed twice", n)
		}
		seen[n] = true
	}
	return nil
}
