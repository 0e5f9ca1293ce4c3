package frontend

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Regression (issue 12, found by the soak suite's slow-loris clients): a
// request fasthttp could not read was answered in plain text ("Request
// timeout", "Error when parsing request") with no X-Request-ID, and a body
// that did not arrive within read_timeout got 400 "invalid JSON".
func TestReadFailuresAnswerOpenAIErrors(t *testing.T) {
	_, _, _, ln := testServerListener(t, bothRoles, func(c *Config) { c.ReadTimeout = 300 * time.Millisecond })
	cases := []struct {
		name    string
		send    string
		status  int
		message string
	}{
		{"headers over max_header_bytes", "POST /v1/chat/completions HTTP/1.1\r\nHost: duet\r\nX-Big: " + strings.Repeat("x", 20<<10) + "\r\n\r\n",
			http.StatusRequestHeaderFieldsTooLarge, "request headers larger than 16384 bytes"},
		{"headers not complete within read_timeout", "POST /v1/chat/completions HTTP/1.1\r\nHost: du",
			http.StatusRequestTimeout, "request not received within 300ms (server.read_timeout)"},
		{"body not complete within read_timeout", "POST /v1/chat/completions HTTP/1.1\r\nHost: duet\r\nContent-Type: application/json\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"mod\r\n", http.StatusRequestTimeout, "request not received within 300ms (server.read_timeout)"},
		{"malformed request", "NOT HTTP\r\n\r\n", http.StatusBadRequest, "malformed HTTP request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := ln.Dial()
			require.NoError(t, err)
			defer conn.Close()
			go func() { _, _ = io.WriteString(conn, tc.send) }() // the server may stop reading midway
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, tc.status, resp.StatusCode, "%s", body)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			require.Len(t, resp.Header.Get("X-Request-ID"), 32, "a minted request id")
			require.Contains(t, string(body), `"error":{"message":"`+tc.message+`"`)
			require.True(t, resp.Close, "the connection is closed after the answer")
		})
	}
}
