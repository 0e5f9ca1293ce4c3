package sim

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/duet-serve/duet/proto/openai"
)

// Engine failures: what each engine sends when a generation fails inside
// it, used by the faults fault_error_event_rate (an internal error after
// fault_die_after_tokens tokens) and fault_kv_pull_fail_rate (a generation
// worker's KV pull fails). Sources, read in the stored index:
//
//   - vLLM: vllm/entrypoints/openai/chat_completion/serving.py (snapshot
//     006c49d4) and the serving base (generate/base/serving.py):
//     finish_reason "error" raises GenerationError("Internal server error");
//     a stream then sends its role chunk (always first), the event of
//     _convert_generation_error_to_streaming_response (json.dumps of
//     ErrorResponse{error: ErrorInfo{message, type "InternalServerError",
//     param, code 500}}, nested since v0.10.1) and [DONE]; a non-streaming
//     request gets that body with status 500. A failed KV load under
//     kv_load_failure_policy "fail" (the default since vLLM PR #34896,
//     Feb 2026) is FINISHED_ERROR, the same GenerationError.
//   - SGLang: serving_chat.py (sgl-project/sglang snapshot 002897c2): an
//     abort carrying an HTTPStatus becomes
//     create_streaming_error_response(msg, code.name, code.value) before the
//     role chunk of a first output, then [DONE], all with HTTP 200 (the
//     stream is kick-started before the response starts); non-streaming,
//     tokenizer_manager raises HTTPException(500, msg), which
//     http_server.py's handler answers as a flat ErrorResponse with type
//     "500" (sglangErrorBody). A failed decode transfer is
//     DecodeTransferQueue.pop_transferred's "Decode transfer failed …
//     KVTransferError(…)" abort (Server.transferFailed).
//   - TensorRT-LLM: tensorrt_llm/serve/openai_server.py (NVIDIA snapshots
//     e7f7345e, 00057725): chat_stream_generator and completion_generator
//     log and re-raise, so a stream ends with no error event and no [DONE],
//     the connection cut; a non-streaming request gets
//     create_error_response(str(e)), HTTP 400 BadRequestError, even for
//     engine failures. A failed KV receive is py_executor's
//     _handle_errors("Error in kv cache transfer for generation requests").
var (
	errEngineFailed = errors.New("injected fault: internal error mid-generation")
	errKVPullFailed = errors.New("injected fault: KV transfer failed")
)

// Messages of the injected failures where the engine's own text depends on
// what failed.
const (
	trtKVTransferError = "Error in kv cache transfer for generation requests"
	injectedInternal   = "injected fault: internal error in the engine"
)

// engineError returns the error the engine reports for err, one of
// errEngineFailed and errKVPullFailed, on request j; nil for other errors.
func (s *Server) engineError(j *job, err error) *httpError {
	kvPull := errors.Is(err, errKVPullFailed)
	if !kvPull && !errors.Is(err, errEngineFailed) {
		return nil
	}
	switch s.cfg.Protocol {
	case ProtocolVLLM:
		return vllmError(http.StatusInternalServerError, "InternalServerError", "Internal server error")
	case ProtocolSGLang:
		if kvPull {
			return s.transferFailed(j, errKVPullFailed.Error())
		}
		return &httpError{status: http.StatusInternalServerError, inStream: j.stream, msg: injectedInternal}
	default:
		msg := injectedInternal
		if kvPull {
			msg = trtKVTransferError
		}
		return trtllmError(http.StatusBadRequest, "BadRequestError", msg)
	}
}

// writeStreamFailure ends the stream of k after an engine failure e (from
// engineError) as the engine does: vLLM sends its role chunk (it goes out
// with the first output, here the failed one), the error event and [DONE];
// SGLang the error event and [DONE]; TensorRT-LLM nothing, its generator
// raises and the connection is cut (cutsStream made the handler set
// Connection: close). The events are flushed.
func (s *Server) writeStreamFailure(k *streamSink, e *httpError) error {
	switch s.cfg.Protocol {
	case ProtocolVLLM:
		if err := k.begin(); err != nil {
			return err
		}
		if err := openai.WriteEvent(k.w, pyDumps(e.body())); err != nil {
			return err
		}
		if err := openai.WriteDone(k.w); err != nil {
			return err
		}
	case ProtocolSGLang:
		if _, err := k.w.Write(sglangStreamError(e)); err != nil {
			return err
		}
	}
	return k.w.Flush()
}

// cutsStream reports whether fault f ends a stream by closing the
// connection: the die fault, and on TensorRT-LLM, which sends no error
// event, every engine failure.
func (s *Server) cutsStream(f faultDraw) bool {
	return f.die || (s.cfg.Protocol == ProtocolTRTLLM && (f.errorEvent || f.kvPullFail))
}

// vllmErrorInfo is vLLM's ErrorInfo (since v0.10.1), inside ErrorResponse's
// "error".
type vllmErrorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// vllmError is an error vLLM answers with its own ErrorResponse:
// {"error": {"message", "type", "param": null, "code": status}}.
func vllmError(status int, typ, msg string) *httpError {
	e := &httpError{status: status, msg: msg}
	e.wire, _ = json.Marshal(struct {
		Error vllmErrorInfo `json:"error"`
	}{vllmErrorInfo{Message: msg, Type: typ, Code: status}}) // plain struct, cannot fail
	return e
}

// flatError is the flat ErrorResponse of SGLang and TensorRT-LLM (and of
// vLLM before v0.10.1): the HTTP status as an integer code.
type flatError struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func newFlatError(e *httpError, typ string) flatError {
	out := flatError{Object: "error", Message: e.msg, Type: typ, Code: e.status}
	if e.param != "" {
		out.Param = &e.param
	}
	return out
}

// trtllmError is an error TensorRT-LLM answers with create_error_response:
// {"object": "error", "message", "type", "param": null, "code": status}.
func trtllmError(status int, typ, msg string) *httpError {
	e := &httpError{status: status, msg: msg}
	e.wire, _ = json.Marshal(newFlatError(e, typ)) // plain struct, cannot fail
	return e
}

// pyDumps re-spaces compact JSON as Python's json.dumps writes it by
// default, with ", " between items and ": " after keys, for the events the
// Python engines build with json.dumps. (json.dumps also escapes non-ASCII
// as \uXXXX; the sim's messages are ASCII.)
func pyDumps(compact []byte) []byte {
	out := make([]byte, 0, len(compact)+len(compact)/8)
	inString, escaped := false, false
	for _, c := range compact {
		out = append(out, c)
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ':' || c == ','):
			out = append(out, ' ')
		}
	}
	return out
}
