package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConformanceFakesEnforceContracts talks to the fake engines directly:
// each rejects what its engine rejects, so a duet that breaks the wire
// contract fails the conformance suite instead of passing against a
// fake that only records.
func TestConformanceFakesEnforceContracts(t *testing.T) {
	t.Run("vllm", testVLLMFakeContract)
	t.Run("trtllm", testTRTFakeContract)
	t.Run("sglang", testSGLangFakeContract)
}

const contractChat = `{"model":"` + fakeModel + `","messages":[{"role":"user","content":"hi there"}],"max_tokens":1`

func testVLLMFakeContract(t *testing.T) {
	fakes := startVLLMFakes(t, 1, 1)
	fakes.set(vllmVariant{pFinish: "length", pParams: "flat"})
	p, dec := fakes.ctx[0].url+"/v1/chat/completions", fakes.gen[0].url+"/v1/chat/completions"
	pp := `,"kv_transfer_params":` + vllmPrefillParams
	prefill := func(t *testing.T, id string) json.RawMessage {
		code, _, body := post(t, p, contractChat+pp+`,"stream":false}`, "X-Request-Id", id)
		require.Equal(t, 200, code, string(body))
		var r struct {
			KV json.RawMessage `json:"kv_transfer_params"`
		}
		require.NoError(t, json.Unmarshal(body, &r))
		return r.KV
	}
	for _, tc := range []struct {
		name, url, body string
		status          int
		contains        string
	}{
		{"not JSON", p, `{"model":`, 400, `"Bad Request"`},
		{"prefill streams", p, contractChat + pp + `,"stream":true}`, 400, "Prefill does not support streaming"},
		{"prefill min_tokens above max_tokens 1", p, contractChat + pp + `,"min_tokens":2}`, 400, "min_tokens must be less than or equal to max_tokens=1"},
		{"prefill min_completion_tokens above 1", p, contractChat + pp + `,"min_completion_tokens":2}`, 400, "max_tokens=1"},
		{"stream_options without stream", p, contractChat + pp + `,"stream_options":{"include_usage":true}}`, 400, "Stream options"},
		{"unknown model", p, `{"model":"m","messages":[]}`, 404, "NotFoundError"},
		{"decode with a handle never issued", dec, contractChat + `,"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1],"remote_engine_id":"e","remote_request_id":"chatcmpl-x-1","remote_host":"localhost","remote_port":5600}}`, 500, "Internal server error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := post(t, tc.url, tc.body)
			require.Equal(t, tc.status, code, string(body))
			require.Contains(t, string(body), tc.contains)
		})
	}
	t.Run("decode with another prefill's engine id", func(t *testing.T) {
		kv := strings.Replace(string(prefill(t, "a")), `"engine-ctx-0"`, `"engine-ctx-9"`, 1)
		code, _, body := post(t, dec, contractChat+`,"kv_transfer_params":`+kv+`}`)
		require.Equal(t, 500, code, string(body))
	})
	t.Run("decode pulls a handle once", func(t *testing.T) {
		kv := string(prefill(t, "b"))
		code, _, body := post(t, dec, contractChat+`,"kv_transfer_params":`+kv+`}`)
		require.Equal(t, 200, code, string(body))
		code, _, body = post(t, dec, contractChat+`,"kv_transfer_params":`+kv+`}`)
		require.Equal(t, 500, code, string(body))
	})
	t.Run("streamed decode with a bad handle fails after the role chunk", func(t *testing.T) {
		code, _, body := post(t, dec, contractChat+`,"stream":true,"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[1],"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":1}}`)
		require.Equal(t, 200, code)
		events := sseData(body)
		require.Len(t, events, 3, string(body))
		require.Contains(t, events[1], `"code": 500`)
	})
}

func testTRTFakeContract(t *testing.T) {
	fakes := startTRTFakes(t, 1, 1)
	fakes.set(trtVariant{})
	ctx, gen := fakes.ctx[0].url+"/v1/completions", fakes.gen[0].url+"/v1/completions"
	const comp = `{"model":"` + fakeModel + `","prompt":"one two three","max_tokens":4`
	code, _, body := post(t, ctx, comp+`,"disaggregated_params":{"request_type":"context_only","disagg_request_id":1099511627777}}`)
	require.Equal(t, 200, code, string(body))
	var r struct {
		Choices []struct {
			Params map[string]json.RawMessage `json:"disaggregated_params"`
		} `json:"choices"`
		IDs json.RawMessage `json:"prompt_token_ids"`
	}
	require.NoError(t, json.Unmarshal(body, &r))
	h := r.Choices[0].Params
	ctxID := string(h["ctx_request_id"])
	genBody := func(id, extra string) string {
		return fmt.Sprintf(`%s,"prompt":%s,"disaggregated_params":{"request_type":"generation_only","ctx_request_id":%s,"first_gen_tokens":%s,"encoded_opaque_state":%s,"disagg_request_id":1099511627777%s}}`,
			strings.Replace(comp, `,"prompt":"one two three"`, "", 1), r.IDs, id, h["first_gen_tokens"], h["encoded_opaque_state"], extra)
	}
	var f float64
	require.NoError(t, json.Unmarshal([]byte(ctxID), &f))
	rounded := fmt.Sprintf("%.0f", f) // the id after a trip through float64
	require.NotEqual(t, ctxID, rounded, "the fake's ids do not survive float64")
	for _, tc := range []struct {
		name, url, body string
		status          int
		contains        string
	}{
		{"not JSON", ctx, `{"prompt":`, 400, `"error":`},
		{"unknown top-level key", ctx, comp + `,"nvext":{}}`, 400, "extra_forbidden"},
		{"unknown disaggregated_params key", ctx, comp + `,"disaggregated_params":{"request_type":"context_only","x":1}}`, 400, "disaggregated_params.x"},
		{"stream_options without stream", ctx, comp + `,"stream_options":{}}`, 400, "Stream options"},
		{"generation without ctx_request_id", gen, comp + `,"disaggregated_params":{"request_type":"generation_only","first_gen_tokens":[1]}}`, 400, "ctx_request_id is required"},
		{"generation without first_gen_tokens", gen, comp + `,"disaggregated_params":{"request_type":"generation_only","ctx_request_id":12}}`, 400, "first_gen_tokens is required"},
		{"generation with an id never issued", gen, genBody("12345678901234567", ""), 400, "Failed to receive the KV cache"},
		{"generation with the id rounded by a float64", gen, genBody(rounded, ""), 400, "Failed to receive the KV cache"},
		{"generation with the right handle", gen, genBody(ctxID, ""), 200, genText},
		{"generation pulls a handle once", gen, genBody(ctxID, ""), 400, "Failed to receive the KV cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := post(t, tc.url, tc.body)
			require.Equal(t, tc.status, code, string(body))
			require.Contains(t, string(body), tc.contains)
		})
	}
}

func testSGLangFakeContract(t *testing.T) {
	fakes := startSGLangFakes(t, 2, 1)
	fakes.set(sglVariant{meetTimeout: 300 * time.Millisecond})
	body := func(port int, room uint64) string {
		return fmt.Sprintf(`%s,"bootstrap_host":"127.0.0.1","bootstrap_port":%d,"bootstrap_room":%d}`, contractChat, port, room)
	}
	pre, dec := fakes.ctx[0].url+"/v1/chat/completions", fakes.gen[0].url+"/v1/chat/completions"
	// both sends the two legs at once, as SGLang's router does, and returns
	// the prefill's and the decode's status and body.
	both := func(t *testing.T, prefillBody, decodeBody string) (int, string, int, string) {
		var wg sync.WaitGroup
		var pc int
		var pb []byte
		wg.Add(1)
		go func() { defer wg.Done(); pc, _, pb = post(t, pre, prefillBody) }()
		dc, _, db := post(t, dec, decodeBody)
		wg.Wait()
		return pc, string(pb), dc, string(db)
	}
	t.Run("not JSON", func(t *testing.T) {
		code, _, b := post(t, dec, `{"model":`)
		require.Equal(t, 400, code, string(b))
	})
	t.Run("prefill without bootstrap_room", func(t *testing.T) {
		code, _, b := post(t, pre, contractChat+`}`)
		require.Equal(t, 400, code, string(b))
		require.Contains(t, string(b), "without bootstrap room id")
	})
	t.Run("legs meet through the prefill's bootstrap port", func(t *testing.T) {
		b := body(fakes.bootstrapPorts[0], 1)
		pc, pb, dc, db := both(t, b, b)
		require.Equal(t, 200, pc, pb)
		require.Equal(t, 200, dc, db)
		require.Contains(t, db, `"content":"Sure"`) // max_tokens 1
	})
	t.Run("decode given another prefill's bootstrap port", func(t *testing.T) {
		pc, pb, dc, db := both(t, body(fakes.bootstrapPorts[0], 2), body(fakes.bootstrapPorts[1], 2))
		require.Equal(t, 500, dc, db)
		require.Contains(t, db, "KVTransferError(bootstrap_room=2)")
		require.Equal(t, 500, pc, pb)
		require.Contains(t, pb, "KVPoll.Bootstrapping")
	})
	t.Run("decode given a port with no bootstrap server", func(t *testing.T) {
		code, _, b := post(t, dec, body(freePorts(t, 1)[0], 3))
		require.Equal(t, 500, code, string(b))
		require.Contains(t, string(b), "could not fetch prefill parallel info")
	})
	t.Run("room that never reached a prefill", func(t *testing.T) {
		code, _, b := post(t, dec, body(fakes.bootstrapPorts[0], 4))
		require.Equal(t, 500, code, string(b))
		require.Contains(t, string(b), "KVPoll.WaitingForInput")
	})
	t.Run("streamed decode failure is an error frame", func(t *testing.T) {
		code, _, b := post(t, dec, strings.TrimSuffix(body(fakes.bootstrapPorts[0], 5), "}")+`,"stream":true}`)
		require.Equal(t, http.StatusOK, code)
		events := sseData(b)
		require.Equal(t, []string{"[DONE]"}, events[1:], string(b))
		require.Contains(t, events[0], `"type": "INTERNAL_SERVER_ERROR"`)
	})
}
