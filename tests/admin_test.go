package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func adminCall(t *testing.T, method, url, token, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestAdminAddDrainRemoveWorkers(t *testing.T) {
	d := startServe(t, serveOptions{policy: "least-load", nCtx: 1, nGen: 1, adminToken: "s3cret"})
	extra := startSim(t, "--role", "generation", "--protocol", "trtllm")
	api := d.url + "/admin/workers"

	require.Equal(t, http.StatusUnauthorized, adminCall(t, http.MethodPost, api, "", `{}`))
	require.Equal(t, http.StatusUnauthorized, adminCall(t, http.MethodPost, api, "wrong", `{}`))
	require.Equal(t, http.StatusBadRequest, adminCall(t, http.MethodPost, api, "s3cret", `{"id":"gen-x","url":"ftp://x","role":"generation"}`))
	require.Equal(t, http.StatusBadRequest, adminCall(t, http.MethodPost, api, "s3cret", `{"id":"gen-x","url":"http://x","role":"decode"}`))
	require.Equal(t, http.StatusConflict, adminCall(t, http.MethodPost, api, "s3cret", `{"id":"gen-0","url":"http://x","role":"generation"}`))

	require.Equal(t, http.StatusOK, adminCall(t, http.MethodPost, api, "s3cret", fmt.Sprintf(`{"id":"gen-x","url":%q,"role":"generation"}`, extra)))
	require.Eventually(t, func() bool {
		for _, w := range d.cluster(t).Workers {
			if w.ID == "gen-x" && w.Healthy {
				return true
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond, "the added worker passes its health check")

	require.Equal(t, http.StatusOK, adminCall(t, http.MethodPost, api+"/gen-0/drain", "s3cret", ""))
	for i := 0; i < 4; i++ {
		code, hdr, body := d.chat(t, false, fmt.Sprint("drained ", i), "")
		require.Equal(t, http.StatusOK, code, string(body))
		require.Equal(t, "gen-x", hdr.Get("X-Duet-Gen-Worker"), "a draining worker gets no new work")
	}
	require.Equal(t, http.StatusOK, adminCall(t, http.MethodPost, api+"/gen-0/undrain", "s3cret", ""))
	require.Equal(t, http.StatusOK, adminCall(t, http.MethodDelete, api+"/gen-x", "s3cret", ""))
	require.Equal(t, http.StatusNotFound, adminCall(t, http.MethodDelete, api+"/gen-x", "s3cret", ""))
	require.Len(t, d.cluster(t).Workers, 2)
	code, hdr, _ := d.chat(t, false, "after removal", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "gen-0", hdr.Get("X-Duet-Gen-Worker"))
	d.requireIdle(t)
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	d := startServe(t, serveOptions{nCtx: 1, nGen: 1})
	require.Equal(t, http.StatusNotFound, adminCall(t, http.MethodPost, d.url+"/admin/workers", "anything", `{}`))
}
