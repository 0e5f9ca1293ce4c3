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
	long := strings.Repeat("word ", 140000)
	for _, tc := range []struct{ path, body, param, message string }{
		{"chat/completions", `"max_tokens":9223372036854775800,"messages":[{"role":"user","content":"x"}]`, `"param":"max_tokens"`, "131072"},
		{"chat/completions", `"max_completion_tokens":131073,"messages":[{"role":"user","content":"x"}]`, `"param":"max_completion_tokens"`, "131072"},
		{"chat/completions", `"min_tokens":131073,"messages":[{"role":"user","content":"x"}]`, `"param":"min_tokens"`, "131072"},
		{"chat/completions", `"messages":[{"role":"user","content":"` + long + `"}]`, `"param":"messages"`, "131072"},
		{"chat/completions", `"max_tokens":131000,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 1000) + `"}]`, `"param":"max_tokens"`, "131072"},
		{"completions", `"prompt":"` + long + `"`, `"param":"prompt"`, "131072"},
		{"completions", `"prompt":[1,2,3],"max_tokens":131070`, `"param":"max_tokens"`, "131072"},
		// Keys the engines read differently from encoding/json.
		{"chat/completions", `"max_tokens":131000,"MAX_TOKENS":5,"messages":[{"role":"user","content":"x"}]`, `"param":"MAX_TOKENS"`, "case-sensitive"},
		{"completions", `"prompt":"x","max_tokens":131000,"max_tokens":5`, `"param":"max_tokens"`, "duplicate key"},
	} {
		code, _, body := post(t, d.url+"/v1/"+tc.path, `{"model":"meta-llama/Llama-3.1-8B-Instruct",`+tc.body+`}`)
		require.Equal(t, http.StatusBadRequest, code, string(body))
		require.Contains(t, string(body), tc.param)
		require.Contains(t, string(body), tc.message)
	}
	require.Empty(t, ctx.engine.recorded(), "no worker call")
	require.Empty(t, gen.engine.recorded())
	d.requireIdle(t)
}
