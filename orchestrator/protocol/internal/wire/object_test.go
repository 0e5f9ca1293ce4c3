package wire

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/duet-serve/duet/orchestrator/protocol"

	"github.com/stretchr/testify/require"
)

func TestDecodeObject(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]json.RawMessage
		wantErr  string
	}{
		{name: "empty", in: ` { } `, want: map[string]json.RawMessage{}},
		{name: "values kept as written", in: "{\"a\" : 18446744073709551615,\n\"b\":[1, {\"c\":\"}]\\\"\"}],\"d\":\"x\\u0041\",\"e\":null,\"f\":-1.5e3,\"g\":true}",
			want: map[string]json.RawMessage{"a": raw(`18446744073709551615`), "b": raw(`[1, {"c":"}]\""}]`), "d": raw(`"x\u0041"`), "e": raw(`null`), "f": raw(`-1.5e3`), "g": raw(`true`)}},
		{name: "escaped key unescaped", in: `{"kv_transfer_param\u0073":1}`, want: map[string]json.RawMessage{"kv_transfer_params": raw(`1`)}},
		{name: "duplicate key last wins", in: `{"a":1,"a":2}`, want: map[string]json.RawMessage{"a": raw(`2`)}},
		{name: "array", in: `[1]`, wantErr: "not a JSON object"},
		{name: "null", in: `null`, wantErr: "not a JSON object"},
		{name: "syntax", in: `{"a":}`, wantErr: "invalid character '}' looking for beginning of value"},
		{name: "truncated", in: `{"a":1`, wantErr: "unexpected end of JSON input"},
		{name: "empty input", in: ``, wantErr: "unexpected end of JSON input"},
		{name: "trailing data", in: `{} {}`, wantErr: "invalid character '{' after top-level value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeObject([]byte(tc.in))
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, asMap(&got))
		})
	}
}

func TestDecodeObjectDoesNotAlias(t *testing.T) {
	in := []byte(`{"a":"value"}`)
	o, err := DecodeObject(in)
	require.NoError(t, err)
	copy(in, bytes.Repeat([]byte("x"), len(in)))
	require.Equal(t, `"value"`, string(o.Get("a")))
}

func TestEncode(t *testing.T) {
	o := objectOf(map[string]json.RawMessage{
		"b":         raw(`{"x": 1}`),
		"a":         Uint(18446744073709551615),
		"html<&>":   String("<b>&</b>"),
		"ctl\n\"\\": String("line\nbreak \"q\" \\ \u2028"),
		"nil":       nil,
		"bad utf8":  String("\xff"),
	})
	got := o.Encode()
	require.True(t, json.Valid(got), string(got))
	require.Equal(t, `{"a":18446744073709551615,"b":{"x": 1},"bad utf8":"\ufffd","ctl\n\"\\":"line\nbreak \"q\" \\ \u2028","html<&>":"<b>&</b>","nil":null}`, string(got))
}

func TestLiterals(t *testing.T) {
	require.Equal(t, "9223372036854775807", string(Uint(1<<63-1)))
	require.Equal(t, "-3", string(Int(-3)))
	require.True(t, IsNull(nil))
	require.True(t, IsNull(raw(" null ")))
	require.False(t, IsNull(raw("0")))
	require.True(t, IsObject(raw(" {")))
	require.True(t, IsArray(raw("\n[")))
	require.False(t, IsArray(nil))
	require.True(t, ValidObject(raw(`{"a":1}`)))
	require.False(t, ValidObject(raw(`{"a":}`)))
	require.False(t, ValidObject(raw(`[1]`)))
}

// FuzzDecodeObject checks DecodeObject against encoding/json: the same
// keys, each value equal to what encoding/json decodes, and Encode giving
// valid JSON that decodes back to the same object.
func FuzzDecodeObject(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1}`, `{"a":[1,{"b":"]}"}],"c":"\"\\"}`, `{"\u0061":null,"a":2}`,
		`{"x":18446744073709551615,"y":-0.5e-3}`, `[]`, `{"a":"\xff"}`, "{\"\xffk\":1}", `{"a":1,}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var want map[string]json.RawMessage
		wantErr := json.Unmarshal(in, &want)
		got, err := DecodeObject(in)
		if wantErr != nil || want == nil {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		gotMap := asMap(&got)
		require.Len(t, gotMap, len(want))
		for k, v := range want {
			require.Contains(t, gotMap, k)
			require.Equal(t, string(v), string(gotMap[k]))
		}
		enc := got.Encode()
		require.True(t, json.Valid(enc), string(enc))
		back, err := DecodeObject(enc)
		require.NoError(t, err)
		require.Equal(t, gotMap, asMap(&back))
	})
}

// asMap returns o's members as a map.
func asMap(o *Object) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	for _, mb := range o.members {
		m[mb.key] = mb.value
	}
	return m
}

// objectOf returns an Object with m's members.
func objectOf(m map[string]json.RawMessage) Object {
	var o Object
	for k, v := range m {
		o.Set(k, v)
	}
	return o
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// BenchmarkClientBodyRewrite is one leg's body rewrite as the vLLM
// adapter's ContextRequest does it (ClientBody, Set, Delete, Encode), and
// TensorRT-LLM's handle rewrite (DecodeObject, Set, Encode).
func BenchmarkClientBodyRewrite(b *testing.B) {
	for _, bc := range []struct {
		name string
		body string
	}{
		// orchestrator/bench_test.go's benchChatBody.
		{"chat", `{"model":"m","max_tokens":16,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Summarise the plot of a short story about a lighthouse keeper in two sentences."}]}`},
		// vllm/testdata/requests/chat_extra_fields.json.
		{"extra_fields", `{
  "model": "llama-3-8b",
  "messages": [{"role": "user", "content": "Is <b>bold</b> & \"quoted\" text kept? \u00e9\u4e16"}],
  "max_tokens": 64,
  "ignore_eos": true,
  "min_tokens": 8,
  "min_completion_tokens": 8,
  "seed": 12345678901234567,
  "logit_bias": {"50256": -100},
  "nvext": {"greed_sampling": true, "top_k": 1, "annotations": ["a", "b"]},
  "response_format": {"type": "json_object"}
}`},
	} {
		in := protocol.Input{Endpoint: protocol.EndpointChat, Body: []byte(bc.body), RequestID: protocol.MinRequestID}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in.Body)))
			for b.Loop() {
				o, err := ClientBody("bench", in)
				if err != nil {
					b.Fatal(err)
				}
				o.Set("kv_transfer_params", raw(`{"do_remote_decode":true}`))
				o.Set("stream", False)
				o.Set("max_tokens", raw(`1`))
				if o.Has("max_completion_tokens") {
					o.Set("max_completion_tokens", raw(`1`))
				}
				o.Delete("stream_options", "min_tokens", "min_completion_tokens")
				_ = o.Encode()
			}
		})
	}
	handle := []byte(`{"request_type":"context_only","first_gen_tokens":[791],"ctx_request_id":1099511627783,"encoded_opaque_state":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=","draft_tokens":null,"disagg_request_id":1099511627783}`)
	b.Run("handle", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(handle)))
		for b.Loop() {
			o, err := DecodeObject(handle)
			if err != nil {
				b.Fatal(err)
			}
			o.Set("request_type", raw(`"generation_only"`))
			o.Set("disagg_request_id", raw(`1099511627784`))
			o.Delete("conversation_id", "ctx_usage")
			_ = o.Encode()
		}
	})
}
