package disagg

// SGLang bootstrap body keys.
const (
	FieldBootstrapHost = "bootstrap_host"
	FieldBootstrapPort = "bootstrap_port"
	FieldBootstrapRoom = "bootstrap_room"
)

// DefaultBootstrapPort is SGLang's default prefill bootstrap port.
const DefaultBootstrapPort = 8998

// Bootstrap holds SGLang's bootstrap fields, added to the same body that is
// sent to the prefill and the decode worker at once.
type Bootstrap struct {
	Host string `json:"bootstrap_host"`
	Port int    `json:"bootstrap_port"`
	Room uint64 `json:"bootstrap_room"`
}

// InternalFields are the body keys only duet may set on a request to a
// worker. A client's values for them are never forwarded: they would let a
// client point a gen worker at someone else's KV cache. (A client's
// disaggregated_params.conversation_id is read as a session key before the
// field is dropped.)
var InternalFields = []string{
	FieldDisaggregatedParams,
	FieldKVTransferParams,
	FieldBootstrapHost,
	FieldBootstrapPort,
	FieldBootstrapRoom,
	"prompt_token_ids",
}
