package orchestrator

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Regression (issue 12, found by the soak suite's SIGKILLed workers): when
// a worker restarted, every connection duet pooled to its old process was
// stale; the retry on "a new connection" took the next one from the same
// pool, failed again, and the request failed and ejected the restarted,
// healthy worker. The retry now closes the idle connections first.
func TestManyStaleConnectionsCostNoRequest(t *testing.T) {
	ctxW, gen := newFakeWorker(t, ctxOK), newFakeWorker(t, genStream(2, true))
	h := newHarness(t, testConfig(), []*fakeWorker{ctxW}, []*fakeWorker{gen})
	for _, w := range []*fakeWorker{ctxW, gen} { // four idle connections to each worker
		hc, err := h.o.up.client(w.srv.URL)
		require.NoError(t, err)
		var release []func()
		for i := 0; i < 4; i++ {
			cc, err := hc.AcquireConn(time.Second, false)
			require.NoError(t, err)
			release = append(release, func() { hc.ReleaseConn(cc) })
		}
		for _, r := range release {
			r()
		}
		require.Equal(t, 4, hc.ConnsCount())
		// Only connections the server has accepted are closed below.
		require.Eventually(t, func() bool { return w.accepted.Load() == 4 }, 5*time.Second, time.Millisecond)
	}
	ctxW.srv.CloseClientConnections() // the workers restart: every pooled connection is stale
	gen.srv.CloseClientConnections()
	time.Sleep(10 * time.Millisecond) // the close reaches duet's idle connections
	resp, out := h.run(testChatBody(false, ""), nil)
	require.Equal(t, http.StatusOK, resp.Status, out)
	require.Equal(t, int64(2), h.o.up.staleRetries.Load(), "one retry per worker: the other stale connections were closed first")
	require.Zero(t, h.pool.Get("ctx-0").Ejections()+h.pool.Get("gen-0").Ejections(), "no worker taken for dead")
}

func TestRemovedWorkersClientIsDropped(t *testing.T) {
	gen := newFakeWorker(t, genStream(1, true))
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{gen})
	resp, _ := h.run(testChatBody(false, ""), nil)
	require.Equal(t, http.StatusOK, resp.Status)
	require.Contains(t, h.o.up.clients, gen.srv.URL)
	h.pool.Sync(h.members[:1]) // the gen worker leaves
	require.NotContains(t, h.o.up.clients, gen.srv.URL)
	require.Len(t, h.o.up.clients, 1, "the ctx worker's stays")
}
