package wire

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeObject(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Object
		wantErr  string
	}{
		{name: "empty", in: ` { } `, want: Object{}},
		{name: "values kept as written", in: "{\"a\" : 18446744073709551615,\n\"b\":[1, {\"c\":\"}]\\\"\"}],\"d\":\"x\\u0041\",\"e\":null,\"f\":-1.5e3,\"g\":true}",
			want: Object{"a": raw(`18446744073709551615`), "b": raw(`[1, {"c":"}]\""}]`), "d": raw(`"x\u0041"`), "e": raw(`null`), "f": raw(`-1.5e3`), "g": raw(`true`)}},
		{name: "escaped key unescaped", in: `{"kv_transfer_param\u0073":1}`, want: Object{"kv_transfer_params": raw(`1`)}},
		{name: "duplicate key last wins", in: `{"a":1,"a":2}`, want: Object{"a": raw(`2`)}},
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
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDecodeObjectDoesNotAlias(t *testing.T) {
	in := []byte(`{"a":"value"}`)
	o, err := DecodeObject(in)
	require.NoError(t, err)
	copy(in, bytes.Repeat([]byte("x"), len(in)))
	require.Equal(t, `"value"`, string(o["a"]))
}

func TestEncode(t *testing.T) {
	o := Object{
		"b":         raw(`{"x": 1}`),
		"a":         Uint(18446744073709551615),
		"html<&>":   String("<b>&</b>"),
		"ctl\n\"\\": String("line\nbreak \"q\" \\ \u2028"),
		"nil":       nil,
		"bad utf8":  String("\xff"),
	}
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
		require.Len(t, got, len(want))
		for k, v := range want {
			require.Contains(t, got, k)
			require.Equal(t, string(v), string(got[k]))
		}
		enc := got.Encode()
		require.True(t, json.Valid(enc), string(enc))
		back, err := DecodeObject(enc)
		require.NoError(t, err)
		require.Equal(t, got, back)
	})
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }
