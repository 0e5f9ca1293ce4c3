package sim

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/duet-serve/duet/tokenizer"
)

// LoRA adapters (lora_adapters): the worker serves each named adapter on top
// of its model, as if loaded at startup from adapterRoot(name), and a
// request selects one the way the protocol's engine reads it:
//
//   - vLLM (vllm/entrypoints/openai/engine/serving.py _check_model;
//     models/serving.py show_available_models): "model": "<adapter>". An
//     adapter name is a model; any other name is the 404 of checkModel.
//     /v1/models lists each adapter after the base model.
//   - SGLang (python/sglang/srt/entrypoints/openai/serving_base.py
//     _parse_model_parameter, _resolve_lora_path; managers/tokenizer_manager.py
//     _validate_and_resolve_lora): "model": "<base>:<adapter>", split on the
//     first ':' with both parts trimmed and an empty adapter part meaning
//     none, or the body field "lora_path": "<adapter>"; the model's adapter
//     wins. A bare adapter name as model selects nothing (here: the unknown
//     model 404, as for any other name). An adapter never loaded is a 400
//     BadRequestError, reported in-stream for a streaming request, as
//     SGLang's stream generator catches the ValueError. Recent SGLang
//     (http_server.py available_models) lists adapters on /v1/models.
//   - TensorRT-LLM (tensorrt_llm/serve/openai_protocol.py: lora_request:
//     Optional[LoRARequest] on both request kinds): the body field
//     lora_request, validated as trtllm-serve's pydantic does (trtlora.go);
//     the adapter is its lora_name. /v1/models lists no adapters.
//
// An adapter is part of the KV cache's identity, as in every engine: a
// request's block hashes are salted with its adapter (seqHashes), so two
// adapters, or an adapter and the base model, never share cached blocks,
// and usage's cached_tokens says so. KV events name the adapter of the
// blocks they store (kvevents.go).

// adapterRoot is the path an adapter was "loaded from": its root on
// /v1/models and the only lora_path that exists for it on the worker's disk
// (TensorRT-LLM's LoRARequest checks that the path exists).
func adapterRoot(name string) string { return "/adapters/" + name }

// adapterIDs numbers adapters from 1 in order, as vLLM's lora_id_counter
// assigns lora_int_id to --lora-modules at startup; KV events carry it as
// lora_id.
func adapterIDs(names []string) map[string]int64 {
	ids := make(map[string]int64, len(names))
	for i, n := range names {
		ids[n] = int64(i + 1)
	}
	return ids
}

// seqHashes returns the chained hashes of the full blocks of tokens, a
// sequence computed with adapter ("" for the base model): salted with the
// adapter, so that no block hash is shared across adapters.
func seqHashes(tokens []int, blockSize int, adapter string) []uint64 {
	if adapter == "" {
		return tokenizer.BlockHashes(tokens, blockSize)
	}
	return tokenizer.SaltedBlockHashes(tokens, blockSize, tokenizer.AdapterSalt(adapter, ""))
}

// hasAdapter reports whether name is one of the worker's adapters.
func (s *Server) hasAdapter(name string) bool { return slices.Contains(s.cfg.LoraAdapters, name) }

// servesModel reports whether a request may name model: the model itself,
// for vLLM an adapter's name, and for SGLang "<model>:<anything>" (the
// adapter part is checked by selectAdapter).
func (s *Server) servesModel(model string) bool {
	switch {
	case model == s.cfg.Model:
		return true
	case s.cfg.Protocol == ProtocolVLLM:
		return s.hasAdapter(model)
	case s.cfg.Protocol == ProtocolSGLang:
		base, _, ok := strings.Cut(model, ":")
		return ok && strings.TrimSpace(base) == s.cfg.Model
	}
	return false
}

// selectAdapter sets j.adapter to the adapter the request selects the
// protocol's way, or refuses one the worker does not serve. model is the
// request's model, which checkModel accepted; j.stream is set.
func (s *Server) selectAdapter(j *job, model string, ef engineFields) *httpError {
	switch s.cfg.Protocol {
	case ProtocolVLLM:
		if model != s.cfg.Model {
			j.adapter = model // servesModel let only adapters through
		}
		return nil
	case ProtocolSGLang:
		return s.selectSGLangAdapter(j, model, ef.LoraPath)
	default:
		return s.selectTRTLLMAdapter(j, ef.LoraRequest)
	}
}

// selectSGLangAdapter reads "<base>:<adapter>" from model, else lora_path.
func (s *Server) selectSGLangAdapter(j *job, model string, loraPath json.RawMessage) *httpError {
	var name string
	if _, a, ok := strings.Cut(model, ":"); ok {
		name = strings.TrimSpace(a)
	}
	if name == "" && len(loraPath) > 0 && string(loraPath) != "null" {
		if err := json.Unmarshal(loraPath, &name); err != nil {
			return badRequest("lora_path", "lora_path: expected one adapter name (a string), got %s", loraPath)
		}
	}
	switch {
	case name == "":
		return nil
	case len(s.cfg.LoraAdapters) == 0:
		// serving_base.py _validate_lora_enabled, before any stream starts.
		return badRequest("", "LoRA adapter '%s' was requested, but LoRA is not enabled. Please launch the server "+
			"with --enable-lora flag and preload adapters using --lora-paths or /load_lora_adapter endpoint.", name)
	case !s.hasAdapter(name):
		// tokenizer_manager.py: f"...: {lora_path}\nAll loaded adapters: {self.lora_ref_cache.keys()}."
		herr := badRequest("", "Got LoRA adapter that has never been loaded: %s\nAll loaded adapters: %s.",
			name, pyDictKeys(s.cfg.LoraAdapters))
		herr.inStream, herr.streamType = j.stream, "BadRequestError"
		return herr
	}
	j.adapter = name
	return nil
}

// selectTRTLLMAdapter takes the adapter from lora_request, which
// checkTRTLLMFields has validated (its lora_name is one of the worker's
// adapters).
func (s *Server) selectTRTLLMAdapter(j *job, raw json.RawMessage) *httpError {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var r struct {
		LoraName string `json:"lora_name"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || !s.hasAdapter(r.LoraName) {
		return &httpError{status: http.StatusBadRequest, param: "lora_request", msg: "lora_request: not a LoRA adapter of this worker"}
	}
	j.adapter = r.LoraName
	return nil
}

// pyDictKeys is Python's repr of a dict's keys() view with these keys:
// dict_keys(['a', 'b']).
func pyDictKeys(keys []string) string {
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = pyRepr(k)
	}
	return "dict_keys([" + strings.Join(quoted, ", ") + "])"
}
