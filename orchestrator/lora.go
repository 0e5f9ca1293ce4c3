package orchestrator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/duet-serve/duet/orchestrator/protocol/sglang"
	"github.com/duet-serve/duet/orchestrator/protocol/trtllm"
	"github.com/duet-serve/duet/orchestrator/protocol/vllm"
	"github.com/duet-serve/duet/proto/openai"
)

// LoRA adapters. A request names an adapter the way its workers' engine
// reads it, and duet reads the same field to route it only to workers that
// serve the adapter (router.Request.Adapter) and to keep its cache credit
// apart from the base model's and other adapters' (the adapter seeds the
// block hashes):
//   - vLLM: the adapter's name as "model" (vllm/entrypoints/openai
//     engine/serving.py, _check_model and _maybe_get_adapters);
//   - SGLang: "model": "BASE:ADAPTER", or else the body's "lora_path"
//     (python/sglang/srt/entrypoints/openai/serving_chat.py: the model's
//     adapter part wins);
//   - TensorRT-LLM: the body's "lora_request": {"lora_name": ...}
//     (tensorrt_llm/serve/openai_protocol.py, LoRARequest).
//
// The body reaches the workers unchanged.

// loraFields are the body fields that name an adapter besides the model.
type loraFields struct {
	// LoraPath is SGLang's lora_path: one adapter name for a single
	// prompt (a list, for batches, names none duet routes by).
	LoraPath json.RawMessage `json:"lora_path"`
	// LoraRequest is TensorRT-LLM's lora_request.
	LoraRequest *struct {
		LoraName string `json:"lora_name"`
	} `json:"lora_request"`
}

// adapterOf returns the adapter a request for model with fields lf names
// under the configured protocol ("" for the base model), and whether model
// is a model duet serves (a configured name, or a vLLM adapter's).
func (o *Orchestrator) adapterOf(model string, lf loraFields) (adapter string, known bool) {
	served := len(o.cfg.Models) == 0 || slices.Contains(o.cfg.Models, model)
	switch o.cfg.Protocol {
	case vllm.Name:
		if !slices.Contains(o.cfg.Models, model) && o.router.Pool().HasAdapter(model) {
			return model, true
		}
	case sglang.Name:
		if base, name, ok := strings.Cut(model, ":"); ok && (len(o.cfg.Models) == 0 || slices.Contains(o.cfg.Models, base)) {
			return name, true
		}
		var path string
		if json.Unmarshal(lf.LoraPath, &path) == nil {
			return path, served
		}
	case trtllm.Name:
		if lf.LoraRequest != nil {
			return lf.LoraRequest.LoraName, served
		}
	}
	return "", served
}

// checkAdapter returns a 4xx for a model duet does not serve or an adapter
// no worker serves, in the engine's terms: vLLM's is an unknown model (404),
// SGLang's and TensorRT-LLM's a bad request field (400).
func (o *Orchestrator) checkAdapter(model, adapter string, known bool) error {
	if !known {
		return &Error{Status: http.StatusNotFound, Type: openai.ErrTypeNotFound, Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("model %q does not exist (served: %s)", model, strings.Join(o.servedNames(), ", "))}
	}
	if adapter == "" || o.router.Pool().HasAdapter(adapter) {
		return nil
	}
	param := map[string]string{sglang.Name: "lora_path", trtllm.Name: "lora_request.lora_name"}[o.cfg.Protocol]
	if o.cfg.Protocol == sglang.Name && strings.Contains(model, ":") {
		param = "model"
	}
	return badRequest(param, "LoRA adapter %q is not served by any worker (served: %s)", adapter, listOrNone(o.router.Pool().Adapters()))
}

// resolveModel checks the request's model and sets the adapter it names.
func (o *Orchestrator) resolveModel(model string, lf loraFields, req *Request) error {
	if model == "" {
		return badRequest("model", "model is required")
	}
	adapter, known := o.adapterOf(model, lf)
	if err := o.checkAdapter(model, adapter, known); err != nil {
		return err
	}
	req.Adapter = adapter
	return nil
}

// unalias returns the body of a request that names its model by an alias
// with the model's own name instead, as its workers serve it (the body
// unchanged otherwise). req.Model stays the name the client sent.
func (o *Orchestrator) unalias(req *Request) ([]byte, error) {
	if !o.aliased || len(o.cfg.Models) == 0 || req.Adapter == req.Model || req.Model == o.cfg.Models[0] || !slices.Contains(o.cfg.Models, req.Model) {
		return req.Body, nil
	}
	return openai.RewriteBody(req.Body, map[string]any{"model": o.cfg.Models[0]})
}

// servedNames lists the model names a client may send: the configured
// models and, under vLLM, every adapter a worker serves.
func (o *Orchestrator) servedNames() []string {
	names := slices.Clone(o.cfg.Models)
	if o.cfg.Protocol == vllm.Name {
		names = append(names, o.router.Pool().Adapters()...)
	}
	return names
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
