package kvevents

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func TestExtraKeysNameOnly(t *testing.T) {
	raw := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		return b
	}
	cases := []struct {
		name  string
		extra []byte
		lora  string
		want  bool
	}{
		{"absent", nil, "", true},
		{"null", raw(nil), "", true},
		{"the adapter on every block", raw([]any{[]any{"sql"}, []any{"sql"}}), "sql", true},
		{"null blocks among them", raw([]any{nil, []any{"sql"}}), "sql", true},
		{"another adapter", raw([]any{[]any{"chat"}}), "sql", false},
		{"the adapter and a salt", raw([]any{[]any{"sql", "salt"}, []any{"sql"}}), "sql", false},
		{"a multimodal hash without an adapter", raw([]any{[]any{"mm-hash"}}), "", false},
		{"not msgpack", []byte{0xc1}, "sql", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &BlockStored{ExtraKeys: c.extra}
			require.Equal(t, c.want, e.ExtraKeysNameOnly(c.lora))
		})
	}
}
