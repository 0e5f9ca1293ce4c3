package tests

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// End-to-end tests of issue 12's limits.

// Regression (issue 12): the frontend port was checked only after the
// whole fleet had launched and turned healthy; with real engines a user
// waited through model loading to learn that the port was taken.
func TestTakenPortFailsBeforeAnyWorkerStarts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	out, err := runDuet(t, "serve", "--port", fmt.Sprint(port))
	require.Error(t, err)
	require.Contains(t, out, fmt.Sprintf("server.port: cannot listen on 127.0.0.1:%d", port))
	require.NotContains(t, out, "worker started", "no worker was launched")
	require.NotContains(t, out, "fleet", "no fleet log line at all")
}

// Regression (issue 12): max_tokens 9223372036854775800 produced a 0-token
// generation lease; a prompt beyond the context length reached the workers.
func TestContextLengthLimitsAnswer400AndChargeNothing(t *testing.T) {
	ctx, gen := startCancelWorker(t, "ctx-0"), startCancelWorker(t, "gen-0")
	d := startFakeDuet(t, fakeDuet{ctx: []*cancelWorker{ctx}, gen: []*cancelWorker{gen}})
	for _, tc := range []struct{ body, param string }{
		{`"max_tokens":9223372036854775800,"messages":[{"role":"user","content":"x"}]`, `"param":"max_tokens"`},
		{`"max_completion_tokens":131073,"messages":[{"role":"user","content":"x"}]`, `"param":"max_completion_tokens"`},
		{`"messages":[{"role":"user","content":"` + strings.Repeat("word ", 140000) + `"}]`, `"param":"messages"`},
	} {
		code, _, body := post(t, d.url+"/v1/chat/completions", `{"model":"meta-llama/Llama-3.1-8B-Instruct",`+tc.body+`}`)
		require.Equal(t, http.StatusBadRequest, code, string(body))
		require.Contains(t, string(body), tc.param)
		require.Contains(t, string(body), "131072")
	}
	require.Empty(t, ctx.engine.recorded(), "no worker call")
	require.Empty(t, gen.engine.recorded())
	d.requireIdle(t)
}
