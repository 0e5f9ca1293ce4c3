package sim

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/proto/openai"
)

// remoteKV says where a generation request's KV waits to be pulled.
type remoteKV struct {
	url      string // base URL of the context worker (SGLang: of its bootstrap server)
	key      string // pin key on the context worker
	firstGen []int  // TensorRT-LLM: tokens the context worker sampled
}

// opaqueState is the JSON inside TensorRT-LLM's encoded_opaque_state: what
// a generation worker needs to pull the KV from this context worker.
type opaqueState struct {
	URL          string `json:"url"`
	Key          string `json:"key"`
	CtxRequestID uint64 `json:"ctx_request_id"`
	PromptTokens int    `json:"prompt_tokens"`
	BlockSize    int    `json:"block_size"`
}

// classify reads the engine fields of the request's protocol into j.phase
// and checks that this worker's role serves that phase (SGLang: derives the
// phase from the role). Fields of the other protocols are ignored, as the
// real engine would.
func (s *Server) classify(j *job, ef engineFields) *httpError {
	var herr *httpError
	switch s.cfg.Protocol {
	case ProtocolTRTLLM:
		herr = s.classifyTRTLLM(j, ef.DisaggregatedParams)
	case ProtocolVLLM:
		herr = s.classifyVLLM(j, ef.KVTransferParams)
	default:
		return s.classifySGLang(j, ef) // the phase follows the role; a prefill may stream
	}
	if herr != nil {
		return herr
	}
	switch {
	case j.phase == phaseContext && !s.role.ServesContext():
		return badRequest("", "this worker's role is %s: it does not serve context-only (prefill) requests", s.role)
	case j.phase == phaseGeneration && !s.role.ServesGeneration():
		return badRequest("", "this worker's role is %s: it does not serve generation-only (decode) requests", s.role)
	case j.phase == phaseContext && j.stream:
		return badRequest("stream", "stream: a context-only (prefill) request must set stream:false")
	}
	return nil
}

func (s *Server) classifyTRTLLM(j *job, p *disagg.DisaggregatedParams) *httpError {
	if p == nil {
		return nil
	}
	j.params = p
	switch p.RequestType {
	case "", disagg.RequestContextAndGeneration:
		return nil
	case disagg.RequestContextOnly:
		j.phase = phaseContext
		j.limit = 1
		return nil
	case disagg.RequestGenerationOnly:
		j.phase = phaseGeneration
	default:
		return badRequest("disaggregated_params.request_type", "disaggregated_params.request_type: unknown %q (valid: %s, %s, %s)",
			p.RequestType, disagg.RequestContextOnly, disagg.RequestGenerationOnly, disagg.RequestContextAndGeneration)
	}
	const param = "disaggregated_params"
	if p.CtxRequestID == nil || p.EncodedOpaqueState == nil || len(p.FirstGenTokens) == 0 {
		return badRequest(param, "%s: a generation_only request needs ctx_request_id, encoded_opaque_state and first_gen_tokens", param)
	}
	if herr := checkTokenIDs(param+".first_gen_tokens", p.FirstGenTokens); herr != nil {
		return herr
	}
	st, err := decodeOpaqueState(*p.EncodedOpaqueState)
	if err != nil {
		return badRequest(param+".encoded_opaque_state", "%s.encoded_opaque_state: %v", param, err)
	}
	if st.CtxRequestID != *p.CtxRequestID {
		return badRequest(param+".ctx_request_id", "%s.ctx_request_id: %d does not match the opaque state's %d", param, *p.CtxRequestID, st.CtxRequestID)
	}
	j.remote = &remoteKV{url: st.URL, key: trtPinKey(*p.CtxRequestID), firstGen: p.FirstGenTokens}
	if len(p.CtxUsage) > 0 && string(p.CtxUsage) != "null" {
		var u openai.Usage
		if err := json.Unmarshal(p.CtxUsage, &u); err != nil {
			return badRequest(param+".ctx_usage", "%s.ctx_usage: %v", param, err)
		}
		j.ctxUsage = &u
	}
	return nil
}

func (s *Server) classifyVLLM(j *job, p *disagg.KVTransferParams) *httpError {
	const param = "kv_transfer_params"
	switch {
	case p == nil || (!p.DoRemoteDecode && !p.DoRemotePrefill):
		return nil
	case p.DoRemoteDecode && p.DoRemotePrefill:
		return badRequest(param, "%s: do_remote_decode and do_remote_prefill are exclusive", param)
	case p.DoRemoteDecode:
		j.phase = phaseContext
		j.limit = 1
		return nil
	}
	j.phase = phaseGeneration
	if p.RemoteRequestID == nil || p.RemoteHost == nil || p.RemotePort == nil {
		return badRequest(param, "%s: do_remote_prefill needs remote_request_id, remote_host and remote_port", param)
	}
	if *p.RemotePort < 1 || *p.RemotePort > 65535 || *p.RemoteHost == "" {
		return badRequest(param, "%s: invalid remote_host/remote_port %q:%d", param, *p.RemoteHost, *p.RemotePort)
	}
	base := "http://" + net.JoinHostPort(*p.RemoteHost, strconv.Itoa(*p.RemotePort))
	j.remote = &remoteKV{url: base, key: *p.RemoteRequestID}
	return nil
}

func trtPinKey(id uint64) string { return "trt-" + strconv.FormatUint(id, 10) }

func encodeOpaqueState(st opaqueState) string {
	b, _ := json.Marshal(st) // plain struct, cannot fail
	return base64.StdEncoding.EncodeToString(b)
}

func decodeOpaqueState(s string) (opaqueState, error) {
	var st opaqueState
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return st, fmt.Errorf("not base64: %w", err)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("not a duet sim state: %w", err)
	}
	if err := checkBaseURL(st.URL); err != nil {
		return st, fmt.Errorf("url: %w", err)
	}
	return st, nil
}

// contextParams builds the disaggregated_params of a context-only response.
// key is empty when the request finished at its first token (no handle).
func (s *Server) contextParams(j *job, id uint64, first int, pinned bool, promptTokens int) json.RawMessage {
	p := disagg.DisaggregatedParams{
		RequestType:    disagg.RequestContextOnly,
		FirstGenTokens: []int{first},
		CtxDPRank:      openai.Ptr(0),
	}
	if j.params != nil {
		p.DisaggRequestID, p.ConversationID = j.params.DisaggRequestID, j.params.ConversationID
	}
	if pinned {
		url := s.URL()
		p.CtxRequestID = &id
		p.EncodedOpaqueState = openai.Ptr(encodeOpaqueState(opaqueState{
			URL: url, Key: trtPinKey(id), CtxRequestID: id, PromptTokens: promptTokens, BlockSize: s.cfg.BlockSize,
		}))
		p.CtxInfoEndpoint = &url
	}
	b, _ := json.Marshal(p) // plain struct, cannot fail
	return b
}

// vllmParams builds the kv_transfer_params of a vLLM prefill response.
func (s *Server) vllmParams(key string, blocks []int32) json.RawMessage {
	host, port := s.hostPort()
	ids := make([]int, len(blocks))
	for i, b := range blocks {
		ids[i] = int(b)
	}
	p := disagg.KVTransferParams{
		DoRemotePrefill: true,
		RemoteEngineID:  &s.engineID,
		RemoteRequestID: &key,
		RemoteBlockIDs:  ids,
		RemoteHost:      &host,
		RemotePort:      &port,
		TPSize:          openai.Ptr(1),
	}
	b, _ := json.Marshal(p) // plain struct, cannot fail
	return b
}

// hostPort splits the advertised URL into host and port for vLLM's
// remote_host/remote_port.
func (s *Server) hostPort() (string, int) {
	u, err := url.Parse(s.URL())
	if err != nil {
		return "", 0
	}
	port, _ := strconv.Atoi(u.Port())
	if port == 0 {
		port = 80
		if u.Scheme == "https" {
			port = 443
		}
	}
	return u.Hostname(), port
}
