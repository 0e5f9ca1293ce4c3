package tests

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQueueBackpressure(t *testing.T) {
	d := startServe(t, serveOptions{nCtx: 1, nGen: 1,
		queue: "{enabled: true, inflight_per_worker: 1, max_queue_length: 1, max_wait: 400ms}"})
	conn, reader := openStream(t, d, 4000) // holds the only slot
	readHeader(t, reader, "X-Duet-Gen-Worker")
	readEvents(t, reader, 2)

	var wg sync.WaitGroup
	var waitedCode int
	var waitedHdr http.Header
	wg.Add(1)
	go func() { // waits in the queue, then times out
		defer wg.Done()
		waitedCode, waitedHdr, _ = d.chat(t, false, "queued", "")
	}()
	require.Eventually(t, func() bool {
		resp, err := http.Get(d.url + "/metrics")
		return err == nil && strings.Contains(readAll(t, resp), `duet_queue_depth{class="normal",key="meta-llama/Llama-3.1-8B-Instruct",priority="normal"} 1`)
	}, 5*time.Second, 20*time.Millisecond, "the second request is waiting")

	code, hdr, body := d.chat(t, false, "rejected at once", "")
	require.Equal(t, http.StatusTooManyRequests, code, string(body))
	require.NotEmpty(t, hdr.Get("Retry-After"))
	require.Contains(t, string(body), "queue_full")

	wg.Wait()
	require.Equal(t, http.StatusServiceUnavailable, waitedCode)
	require.NotEmpty(t, waitedHdr.Get("Retry-After"))

	require.NoError(t, conn.Close()) // frees the slot
	require.Eventually(t, func() bool {
		code, _, _ := d.chat(t, false, "admitted again", "")
		return code == http.StatusOK
	}, 10*time.Second, 100*time.Millisecond)
	d.requireIdle(t)
}
