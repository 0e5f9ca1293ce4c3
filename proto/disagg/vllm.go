package disagg

// FieldKVTransferParams is the body key of vLLM's params.
const FieldKVTransferParams = "kv_transfer_params"

// KVTransferParams is vLLM's NixlConnector kv_transfer_params. A prefill
// request sets DoRemoteDecode; the prefill response sets DoRemotePrefill and
// the Remote* fields, which the decode request carries verbatim.
type KVTransferParams struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	RemoteRequestID *string `json:"remote_request_id,omitempty"`
	RemoteBlockIDs  []int   `json:"remote_block_ids"`
	RemoteHost      *string `json:"remote_host"`
	RemotePort      *int    `json:"remote_port"`
	TPSize          *int    `json:"tp_size,omitempty"`
}

// PrefillKVTransferParams returns the params of a vLLM prefill request.
func PrefillKVTransferParams() KVTransferParams {
	return KVTransferParams{DoRemoteDecode: true}
}
