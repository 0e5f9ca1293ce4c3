//go:build soak

package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// soakFaultSettings are the live fault settings (POST /admin/faults) per
// worker: each kind on a few percent of the calls, so that about a quarter
// of the calls fail one way or another (the gen workers also send their
// engine's error event mid-stream and fail KV pulls as their engine does). gen-0's stream faults strike before
// the first token (duet may still retry the request), gen-1's after five
// (duet continues the stream on gen-0, or, when it cannot, ends it with an
// error event).
var soakFaultSettings = map[string]string{
	"ctx": `{"error_rate":0.03,"hang_rate":0.03,"hang_max":"20s","die_rate":0.03,"garbage_rate":0.04,"cut_rate":0.04,"stall_rate":0.03}`,
	"gen-0": `{"error_rate":0.03,"hang_rate":0.02,"hang_max":"20s","die_rate":0.04,"garbage_rate":0.04,"cut_rate":0.04,"stall_rate":0.03,
	  "error_event_rate":0.03,"kv_pull_fail_rate":0.03,"die_after_tokens":0}`,
	"gen-1": `{"error_rate":0.03,"hang_rate":0.02,"hang_max":"20s","die_rate":0.04,"garbage_rate":0.04,"cut_rate":0.04,"stall_rate":0.03,
	  "error_event_rate":0.03,"kv_pull_fail_rate":0.03,"die_after_tokens":5}`,
}

// soakFaults (issue 12 e): SOAK_FAULT_REQUESTS requests (default 1,000),
// half streaming, 64 at a time, against workers that answer 500s, hang
// before the first byte, die, return garbage (an event or a body that is
// not JSON, an HTML page), close the connection in the middle of an event
// or a body, and stall mid-response. duet's limits are short here (5 s
// for the context phase, the first event and stream silence, 60 s for a
// whole answer), so every request must end well within its 3-minute
// deadline. Then the faults are cleared and a final batch must be answered
// in full.
func soakFaults(t *testing.T, row *soakRow) {
	n := soakEnv(t, "SOAK_FAULT_REQUESTS", 1000)
	const maxTokens = 32
	d := startSoak(t, soakOptions{simArgs: []string{"--itl-base", "20ms"}, limit: 5 * time.Second, total: time.Minute})
	c, err := d.clusterInfo()
	require.NoError(t, err)
	for _, w := range c.Fleet {
		settings, ok := soakFaultSettings[w.Name]
		if !ok {
			settings = soakFaultSettings["ctx"]
		}
		code, _, body := post(t, w.URL+"/admin/faults", settings)
		require.Equal(t, http.StatusOK, code, string(body))
	}
	var tl tally
	runPool(n, 64, func(i int) {
		tl.add(d.client.chat(i, i%2 == 0, maxTokens, 3*time.Minute))
	})
	injected := map[string]float64{}
	for _, w := range c.Fleet {
		err := scrape(w.URL+"/metrics", func(name, labels string, v float64) {
			if _, kind, ok := strings.Cut(labels, `kind="`); ok && name == "duet_sim_faults_injected_total" {
				kind, _, _ = strings.Cut(kind, `"`)
				injected[kind] += v
			}
		})
		require.NoError(t, err)
		req, _ := http.NewRequest(http.MethodDelete, w.URL+"/admin/faults", nil)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	var final tally
	const finalBatch = 50
	runPool(finalBatch, 10, func(i int) {
		final.add(d.client.chat(n+i, i%2 == 0, 16, time.Minute))
	})
	row.note("faults injected by the workers: %s; faults cleared, then %d/%d answered fully",
		formatCounts(injected), final.counts[outFull].Load(), finalBatch)
	d.finish(t, row, &tl)
	require.Equal(t, int64(finalBatch), final.counts[outFull].Load(), "after the faults: %s", final.summary())
}
