package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// TensorRT-LLM's request models forbid unknown fields: OpenAIBaseModel sets
// ConfigDict(extra="forbid", populate_by_name=True), so pydantic fails a
// request that names any other top-level key with an extra_forbidden
// error, which trtllm-serve's RequestValidationError handler answers with
// create_error_response(str(exc)): HTTP 400, a flat BadRequestError. vLLM
// and SGLang ignore unknown fields.
//
// The field lists are ChatCompletionRequest's and CompletionRequest's in
// tensorrt_llm/serve/openai_protocol.py, NVIDIA/TensorRT-LLM snapshot
// 0076e939 (2026 header, the newest in the index), in declaration order.
// Chat's max_completion_tokens has validation_alias "max_tokens"; with
// populate_by_name both names are accepted. Completions have neither
// cache_salt nor max_completion_tokens, and chat has no
// continue_final_message.
var (
	trtChatFields = fieldSet(
		"messages", "prompt_token_ids", "prompt_token_ids_b64", "model", "frequency_penalty", "logit_bias",
		"logprobs", "top_logprobs", "max_completion_tokens", "max_tokens", "n", "presence_penalty",
		"response_format", "seed", "stop", "stream", "stream_options", "temperature", "top_p", "tools",
		"tool_choice", "parallel_tool_calls", "user", "reasoning_effort", "thinking", "thinking_token_budget",
		"prompt_ignore_length", "best_of", "use_beam_search", "top_k", "top_p_min", "min_p",
		"repetition_penalty", "length_penalty", "early_stopping", "stop_token_ids",
		"include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
		"spaces_between_special_tokens", "truncate_prompt_tokens", "lora_request", "echo",
		"add_generation_prompt", "add_special_tokens", "documents", "chat_template", "chat_template_kwargs",
		"injected_chat_template_kwargs", "media_io_kwargs", "disaggregated_params", "conversation_params",
		"cache_salt", "priority", "agent_hierarchy", "mm_processor_kwargs",
	)
	trtCompletionFields = fieldSet(
		"model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
		"presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user",
		"lora_request", "prompt_ignore_length", "use_beam_search", "top_k", "top_p_min", "min_p",
		"repetition_penalty", "length_penalty", "early_stopping", "stop_token_ids",
		"include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
		"spaces_between_special_tokens", "truncate_prompt_tokens", "return_context_logits", "detokenize",
		"thinking_token_budget", "add_special_tokens", "response_format", "disaggregated_params", "priority",
		"conversation_params",
	)
)

func fieldSet(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// fieldError is one pydantic validation error of a trtllm-serve request,
// as FastAPI prints it.
type fieldError struct {
	typ   string          // pydantic's error type: extra_forbidden, missing, ...
	loc   []string        // the field's path under 'body'
	msg   string          // pydantic's message
	input json.RawMessage // the value the error is about, as the request sent it
	ctx   string          // Python repr of the error's ctx dict; "" when it has none
}

// checkTRTLLMFields rejects a body as trtllm-serve's request model for kind
// does: top-level keys the model lacks (extra_forbidden) and an invalid
// lora_request (trtlora.go), each one error, the field's before the
// extras, as pydantic validates the declared fields first. A body that is
// not a JSON object passes: the typed decode reports it.
func (s *Server) checkTRTLLMFields(kind endpointKind, body []byte) *httpError {
	known := trtChatFields
	if kind == kindCompletion {
		known = trtCompletionFields
	}
	members, err := objectMembers(body)
	if err != nil {
		return nil
	}
	var errs, extras []fieldError
	for _, m := range members {
		switch {
		case !known[m.key]:
			extras = append(extras, fieldError{typ: "extra_forbidden", loc: []string{m.key}, msg: "Extra inputs are not permitted", input: m.value})
		case m.key == "lora_request":
			errs = append(errs, s.loraRequestErrors(m.value)...)
		}
	}
	errs = append(errs, extras...)
	if len(errs) == 0 {
		return nil
	}
	return trtllmError(http.StatusBadRequest, "BadRequestError", validationMessage(errs))
}

// member is one key of a JSON object with its value.
type member struct {
	key   string
	value json.RawMessage
}

// objectMembers returns the members of the JSON object raw in the order
// they appear, or an error when raw is not an object. Keys are kept
// exactly, as pydantic compares them (encoding/json would match them
// case-insensitively).
func objectMembers(raw []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string) // an object's tokens alternate key, value
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		out = append(out, member{key: key, value: value})
	}
	return out, nil
}

// validationMessage is str() of FastAPI's RequestValidationError: "N
// validation error(s):" and one line per error, each the repr of its dict
// (fastapi/exceptions.py ValidationException.__str__, fastapi/fastapi
// snapshot 74e9074a). FastAPI appends the endpoint's file and line, which
// depend on the install and are left out; older FastAPI releases, without
// __str__, give the repr of the error list instead.
func validationMessage(errs []fieldError) string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(len(errs)) + " validation error")
	if len(errs) != 1 {
		b.WriteString("s")
	}
	b.WriteString(":")
	for _, e := range errs {
		b.WriteString("\n  {'type': " + pyRepr(e.typ) + ", 'loc': ('body'")
		for _, l := range e.loc {
			b.WriteString(", " + pyRepr(l))
		}
		b.WriteString("), 'msg': " + pyRepr(e.msg) + ", 'input': " + pyReprJSON(e.input))
		if e.ctx != "" {
			b.WriteString(", 'ctx': " + e.ctx)
		}
		b.WriteString("}")
	}
	return b.String()
}

// pyRepr is Python's repr of a str: single quotes unless the text holds a
// single quote and no double quote; backslashes, the quote and control
// characters escaped.
func pyRepr(s string) string {
	q := byte('\'')
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\' || r == rune(q):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// pyReprJSON is Python's repr of the value raw decodes to (json.loads):
// None, True, False, numbers as written, str, list and dict (keys in
// order). Invalid JSON yields its text.
func pyReprJSON(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	if err := writePyRepr(&b, dec); err != nil {
		return string(raw)
	}
	return b.String()
}

// writePyRepr writes the repr of the next value of dec.
func writePyRepr(b *strings.Builder, dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case json.Number:
		b.WriteString(v.String())
	case string:
		b.WriteString(pyRepr(v))
	case json.Delim:
		return writePyContainer(b, dec, v)
	}
	return nil
}

// writePyContainer writes the repr of the list or dict that open began.
func writePyContainer(b *strings.Builder, dec *json.Decoder, open json.Delim) error {
	isDict := open == '{'
	closing := "]"
	if isDict {
		closing = "}"
	}
	b.WriteRune(rune(open))
	for i := 0; dec.More(); i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		if isDict {
			key, err := dec.Token()
			if err != nil {
				return err
			}
			k, _ := key.(string) // a dict's keys are strings
			b.WriteString(pyRepr(k) + ": ")
		}
		if err := writePyRepr(b, dec); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return err
	}
	b.WriteString(closing)
	return nil
}
