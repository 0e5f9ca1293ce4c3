package sim

import (
	"encoding/json"

	"github.com/valyala/fasthttp"

	"github.com/duet-serve/duet/proto/openai"
)

// The simulator lists its model on GET /v1/models as the engine whose
// protocol it speaks does, so that duet's fleet reads its context length
// (max_model_len) as it would from that engine:
//
//   - vLLM (vllm/entrypoints/openai/models/serving.py,
//     show_available_models; max_model_len since v0.5.0,
//     vllm-project/vllm#4643): owned_by "vllm", root the model path,
//     parent null, max_model_len, and one model permission;
//   - SGLang (python/sglang/srt/entrypoints/http_server.py,
//     available_models; max_model_len since sgl-project/sglang#4809):
//     owned_by "sglang", root the served name, parent null, max_model_len;
//   - TensorRT-LLM (tensorrt_llm/serve/openai_protocol.py, ModelCard): id,
//     object, created and owned_by "tensorrt_llm" only: no context length.
//
// vLLM and SGLang list each LoRA adapter (lora_adapters) after the base
// model, with root the path it was loaded from, parent the base model and
// max_model_len null (vLLM's show_available_models builds the adapter's
// ModelCard with a fresh ModelPermission; recent SGLang's available_models
// adds the adapters of its LoRA registry). TensorRT-LLM lists none.

// engineModelCard is vLLM's and SGLang's model card.
type engineModelCard struct {
	openai.Model
	Root        string            `json:"root"`
	Parent      *string           `json:"parent"`               // null: a base model; an adapter's base model
	MaxModelLen *int              `json:"max_model_len"`        // null on an adapter's card
	Permission  []modelPermission `json:"permission,omitempty"` // vLLM only
}

// modelPermission is vLLM's ModelPermission with its defaults
// (vllm/entrypoints/openai/protocol.py).
type modelPermission struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Created            int64   `json:"created"`
	AllowCreateEngine  bool    `json:"allow_create_engine"`
	AllowSampling      bool    `json:"allow_sampling"`
	AllowLogprobs      bool    `json:"allow_logprobs"`
	AllowSearchIndices bool    `json:"allow_search_indices"`
	AllowView          bool    `json:"allow_view"`
	AllowFineTuning    bool    `json:"allow_fine_tuning"`
	Organization       string  `json:"organization"`
	Group              *string `json:"group"`
	IsBlocking         bool    `json:"is_blocking"`
}

// modelOwners is each protocol's engine's owned_by.
var modelOwners = map[string]string{ProtocolTRTLLM: "tensorrt_llm", ProtocolVLLM: "vllm", ProtocolSGLang: "sglang"}

// modelList returns the GET /v1/models body.
func (s *Server) modelList() any {
	card := openai.Model{ID: s.cfg.Model, Object: openai.ObjectModel, Created: s.created, OwnedBy: modelOwners[s.cfg.Protocol]}
	if s.cfg.Protocol == ProtocolTRTLLM {
		return openai.ModelList{Object: openai.ObjectList, Data: []openai.Model{card}}
	}
	maxLen := s.cfg.MaxModelLen
	cards := make([]engineModelCard, 0, 1+len(s.cfg.LoraAdapters))
	cards = append(cards, s.engineCard(card, s.cfg.Model, nil, &maxLen))
	for _, a := range s.cfg.LoraAdapters {
		ac := card
		ac.ID = a
		cards = append(cards, s.engineCard(ac, adapterRoot(a), &s.cfg.Model, nil))
	}
	return struct {
		Object string            `json:"object"`
		Data   []engineModelCard `json:"data"`
	}{openai.ObjectList, cards}
}

// engineCard completes card for vLLM or SGLang; vLLM's cards each get a
// fresh ModelPermission.
func (s *Server) engineCard(card openai.Model, root string, parent *string, maxModelLen *int) engineModelCard {
	c := engineModelCard{Model: card, Root: root, Parent: parent, MaxModelLen: maxModelLen}
	if s.cfg.Protocol == ProtocolVLLM {
		c.Permission = []modelPermission{{ID: "modelperm-" + s.ids.requestID(), Object: "model_permission", Created: s.created,
			AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*"}}
	}
	return c
}

func (s *Server) handleModels(ctx *fasthttp.RequestCtx) {
	body, _ := json.Marshal(s.modelList()) // cannot fail
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}
