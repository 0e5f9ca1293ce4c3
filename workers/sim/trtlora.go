package sim

import (
	"bytes"
	"encoding/json"
	"path"
	"slices"
	"strconv"
	"strings"
)

// TensorRT-LLM's lora_request is a LoRARequest (tensorrt_llm/executor/
// request.py, NVIDIA/TensorRT-LLM snapshot 4ce835a5), a stdlib dataclass:
//
//	lora_name: str
//	lora_int_id: int
//	lora_path: str = ""
//	lora_ckpt_source: str = "hf"
//
// whose __post_init__ raises ValueError when lora_path does not exist on the
// server's disk or lora_ckpt_source is not "hf" or "nemo". pydantic
// validates it as a field of the request model, whose extra="forbid" it
// inherits: an unknown key is an unexpected_keyword_argument error (a
// dataclass's, where a model's is extra_forbidden), a missing or mistyped
// field its own error, and __post_init__ runs only when all fields are
// valid, its ValueError becoming a value_error on lora_request. Note that
// the default lora_path "" never exists, so a request must name the path.
//
// The sim's disk holds adapterRoot(name) for each of its adapters (and the
// directories above them); on top of the engine's checks, lora_name must
// be one of its adapters, a value_error too: the sim serves adapters by
// name (the engine keys its LoRA cache by lora_int_id and loads whatever
// lora_path names).

// loraRequestFields are LoRARequest's fields in declaration order.
var loraRequestFields = []string{"lora_name", "lora_int_id", "lora_path", "lora_ckpt_source"}

// loraRequestErrors validates the value of lora_request (nil when absent or
// null) as trtllm-serve does, returning its errors.
func (s *Server) loraRequestErrors(raw json.RawMessage) []fieldError {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	const field = "lora_request"
	members, err := objectMembers(raw)
	if err != nil {
		return []fieldError{{typ: "dataclass_type", loc: []string{field}, input: raw,
			msg: "Input should be a dictionary or an instance of LoRARequest", ctx: "{'class_name': 'LoRARequest'}"}}
	}
	values := make(map[string]json.RawMessage, len(members))
	for _, m := range members {
		values[m.key] = m.value // json.loads keeps a repeated key's last value
	}
	var errs []fieldError
	for _, name := range loraRequestFields {
		v, ok := values[name]
		switch {
		case !ok && (name == "lora_name" || name == "lora_int_id"):
			errs = append(errs, fieldError{typ: "missing", loc: []string{field, name}, msg: "Field required", input: raw})
		case !ok:
		case name == "lora_int_id":
			if typ, msg := pyIntError(v); typ != "" {
				errs = append(errs, fieldError{typ: typ, loc: []string{field, name}, msg: msg, input: v})
			}
		case !isJSONString(v):
			errs = append(errs, fieldError{typ: "string_type", loc: []string{field, name}, msg: "Input should be a valid string", input: v})
		}
	}
	for _, m := range members {
		if !slices.Contains(loraRequestFields, m.key) {
			errs = append(errs, fieldError{typ: "unexpected_keyword_argument", loc: []string{field, m.key}, msg: "Unexpected keyword argument", input: m.value})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if msg := s.loraPostInit(values); msg != "" {
		return []fieldError{{typ: "value_error", loc: []string{field}, msg: "Value error, " + msg, input: raw,
			ctx: "{'error': ValueError(" + pyRepr(msg) + ")}"}}
	}
	return nil
}

// loraPostInit is LoRARequest.__post_init__ on the sim's disk, then the
// sim's own check of lora_name: the ValueError's message, or "". values
// holds valid fields.
func (s *Server) loraPostInit(values map[string]json.RawMessage) string {
	var name, loraPath string
	source := "hf"
	_ = json.Unmarshal(values["lora_name"], &name) // validated: strings
	if v, ok := values["lora_path"]; ok {
		_ = json.Unmarshal(v, &loraPath)
	}
	if v, ok := values["lora_ckpt_source"]; ok {
		_ = json.Unmarshal(v, &source)
	}
	switch {
	case !s.pathExists(loraPath):
		return "lora_path (" + loraPath + ") does not exist."
	case source != "hf" && source != "nemo":
		return "lora_ckpt_source must be 'hf' or 'nemo', got '" + source + "'"
	case !s.hasAdapter(name):
		served := strings.Join(s.cfg.LoraAdapters, ", ")
		if served == "" {
			served = "none"
		}
		return "lora_name (" + name + ") is not a LoRA adapter of this worker (lora_adapters: " + served + ")"
	}
	return ""
}

// pathExists reports whether p exists on the sim's disk: the adapters'
// roots and the directories above them (os.path.exists; "" never does).
func (s *Server) pathExists(p string) bool {
	if p == "" {
		return false
	}
	p = path.Clean(p)
	if p == "/" || p == path.Dir(adapterRoot("x")) {
		return true
	}
	for _, a := range s.cfg.LoraAdapters {
		if p == adapterRoot(a) {
			return true
		}
	}
	return false
}

// pyIntError returns pydantic's lax-mode error type and message for v as an
// int field ("" when v is valid): integers, integral floats, booleans and
// strings holding an integer pass.
func pyIntError(v json.RawMessage) (typ, msg string) {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return "int_type", "Input should be a valid integer"
	}
	switch n := x.(type) {
	case bool:
		return "", ""
	case json.Number:
		if _, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
			return "", ""
		}
		if f, err := n.Float64(); err == nil && f == float64(int64(f)) {
			return "", ""
		}
		return "int_from_float", "Input should be a valid integer, got a number with a fractional part"
	case string:
		if _, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64); err == nil {
			return "", ""
		}
		return "int_parsing", "Input should be a valid integer, unable to parse string as an integer"
	}
	return "int_type", "Input should be a valid integer"
}

// isJSONString reports whether v is a JSON string.
func isJSONString(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && v[0] == '"'
}
