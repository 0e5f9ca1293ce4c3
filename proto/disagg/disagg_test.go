package disagg

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRole(t *testing.T) {
	r, err := ParseRole("generation")
	require.NoError(t, err)
	require.True(t, r.ServesGeneration())
	require.False(t, r.ServesContext())
	require.True(t, RoleMixed.ServesContext() && RoleMixed.ServesGeneration())
	_, err = ParseRole("decode")
	require.EqualError(t, err, `unknown role "decode" (valid: context, generation, mixed)`)
}

func TestDisaggregatedParamsKeep64BitIDs(t *testing.T) {
	in := `{"request_type":"generation_only","ctx_request_id":18446744073709551615,"disagg_request_id":9007199254740993,"draft_tokens":null}`
	var p DisaggregatedParams
	require.NoError(t, json.Unmarshal([]byte(in), &p))
	require.Equal(t, uint64(18446744073709551615), *p.CtxRequestID)
	require.Equal(t, uint64(9007199254740993), *p.DisaggRequestID)
	out, err := json.Marshal(p)
	require.NoError(t, err)
	require.JSONEq(t, in, string(out))
}

func TestPrefillKVTransferParamsShape(t *testing.T) {
	out, err := json.Marshal(PrefillKVTransferParams())
	require.NoError(t, err)
	require.JSONEq(t, `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`, string(out))
}
