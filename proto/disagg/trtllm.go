package disagg

import "encoding/json"

// TensorRT-LLM request types (disaggregated_params.request_type).
const (
	RequestContextOnly          = "context_only"
	RequestGenerationOnly       = "generation_only"
	RequestContextAndGeneration = "context_and_generation"
)

// FieldDisaggregatedParams is the body key of TensorRT-LLM's params.
const FieldDisaggregatedParams = "disaggregated_params"

// DisaggregatedParams is TensorRT-LLM's disaggregated_params object. The
// orchestrator sets RequestType, DisaggRequestID, ConversationID and
// CtxUsage; the context worker sets the rest.
type DisaggregatedParams struct {
	RequestType        string          `json:"request_type,omitempty"`
	DisaggRequestID    *uint64         `json:"disagg_request_id,omitempty"`
	ConversationID     string          `json:"conversation_id,omitempty"`
	FirstGenTokens     []int           `json:"first_gen_tokens,omitempty"`
	CtxRequestID       *uint64         `json:"ctx_request_id,omitempty"`
	EncodedOpaqueState *string         `json:"encoded_opaque_state,omitempty"`
	DraftTokens        []int           `json:"draft_tokens"`
	CtxDPRank          *int            `json:"ctx_dp_rank,omitempty"`
	CtxInfoEndpoint    *string         `json:"ctx_info_endpoint,omitempty"`
	CtxUsage           json.RawMessage `json:"ctx_usage,omitempty"`
}
