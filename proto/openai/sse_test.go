package openai

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func readAll(t *testing.T, stream string, limit int) ([]string, error) {
	t.Helper()
	r := NewSSEReader(strings.NewReader(stream), limit)
	var out []string
	for {
		data, err := r.Next()
		if err != nil {
			return out, err
		}
		out = append(out, string(data))
	}
}

func TestSSEReader(t *testing.T) {
	cases := []struct {
		name    string
		stream  string
		want    []string
		wantErr error
	}{
		{"events and done", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, "[DONE]"}, io.EOF},
		{"comments skipped", ": ping\n\ndata: x\n\n: ping\n\n", []string{"x"}, io.EOF},
		{"crlf", "data: x\r\n\r\n", []string{"x"}, io.EOF},
		{"no space after colon", "data:x\n\n", []string{"x"}, io.EOF},
		{"multi-line data", "data: a\ndata: b\n\n", []string{"a\nb"}, io.EOF},
		{"other fields ignored", "event: message\nid: 3\ndata: y\n\n", []string{"y"}, io.EOF},
		{"truncated mid-line", "data: x\n\ndata: {\"par", []string{"x"}, io.EOF},
		{"truncated before blank line", "data: x\n\ndata: y\n", []string{"x"}, io.EOF},
		{"too large", "data: " + strings.Repeat("z", 100) + "\n\n", nil, ErrEventTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAll(t, tc.stream, 64)
			require.ErrorIs(t, err, tc.wantErr)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestSSEWriteRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteEvent(&buf, []byte(`{"k":"v"}`)))
	require.NoError(t, WriteComment(&buf, "ping"))
	require.NoError(t, WriteDone(&buf))
	require.Equal(t, "data: {\"k\":\"v\"}\n\n: ping\n\ndata: [DONE]\n\n", buf.String())
	got, err := readAll(t, buf.String(), 0)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, []string{`{"k":"v"}`, "[DONE]"}, got)
	require.True(t, IsDone([]byte(got[1])))
}
