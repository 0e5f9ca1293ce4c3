package tests

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProfilerOnTheDebugAddress(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	d := startServe(t, serveOptions{nCtx: 1, nGen: 1, debugAddr: addr})
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "goroutine profile:")
	code, _, _ := d.chat(t, false, "profiled", "")
	require.Equal(t, http.StatusOK, code)
	resp, err = http.Get(d.url + "/debug/pprof/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "the serving port does not expose the profiler")
}
