package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// End-to-end tests of issue 11's fixes other than cancellation (see
// cancel_test.go), each named after the fault it pins.

// Regression (issue 11): after a gen worker was killed, each request first
// tried it and then redid the whole request, prefill included, until the
// periodic health check noticed (12 prefills for 6 requests).
func TestKilledGenWorkerCostsOneFailedCallAndNoPrefill(t *testing.T) {
	ctx := startCancelWorker(t, "ctx-0")
	gens := []*cancelWorker{startCancelWorker(t, "gen-0"), startCancelWorker(t, "gen-1")}
	d := startFakeDuet(t, fakeDuet{ctx: []*cancelWorker{ctx}, gen: gens,
		fleet: "  unhealthy_threshold: 1000\n"}) // the health check never notices: passive health must
	require.NoError(t, gens[1].engine.srv.Close())
	before := len(ctx.engine.recorded())
	for i := 0; i < 6; i++ {
		code, hdr, body := d.chat(t, i%2 == 0, fmt.Sprint("question ", i), "")
		require.Equal(t, http.StatusOK, code, string(body))
		require.Equal(t, "gen-0", hdr.Get("X-Duet-Gen-Worker"), "request %d", i)
	}
	require.Equal(t, 6, len(ctx.engine.recorded())-before, "one prefill per request: the handle went to the live gen worker")
	require.Equal(t, 1.0, metric(t, d, `duet_retries_total{phase="generation-only"}`), "only the first request touched the dead worker")
	require.Equal(t, 1.0, metric(t, d, `duet_worker_ejections_total{role="generation",worker="gen-1"}`))
	d.requireIdle(t)
}

// Regression (issue 11): the session TTL counted from routing, so a session
// whose own request ran longer than session_ttl expired in flight and its
// next turn was placed anew.
func TestSessionDoesNotExpireWhileItsRequestRuns(t *testing.T) {
	ctx, gens := startCancelWorker(t, "ctx-0"), []*cancelWorker{startCancelWorker(t, "gen-0"), startCancelWorker(t, "gen-1")}
	for _, g := range gens {
		g.events, g.gap = 15, 100*time.Millisecond // a 1.5 s stream
	}
	d := startFakeDuet(t, fakeDuet{ctx: []*cancelWorker{ctx}, gen: gens, router: "{policy: conversation, session_ttl: 1s}"})
	code, hdr, body := d.chat(t, true, "first turn", "", "X-Session-ID", "long-turns")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, "new", hdr.Get("X-Duet-Route"))
	code, hdr, body = d.chat(t, true, "second turn", "", "X-Session-ID", "long-turns")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, "sticky", hdr.Get("X-Duet-Route"), "the TTL counts from the end of the last request")
	time.Sleep(1500 * time.Millisecond) // idle longer than the TTL
	_, hdr, _ = d.chat(t, false, "much later", "", "X-Session-ID", "long-turns")
	require.Equal(t, "new", hdr.Get("X-Duet-Route"), "an idle session still expires")
}

// Regression (issue 11): a pinned worker removed through the admin API was
// re-picked correctly but the turn was labelled sticky, not repin.
func TestRemovedPinnedWorkerIsRepinned(t *testing.T) {
	ctx := startCancelWorker(t, "ctx-0")
	gens := []*cancelWorker{startCancelWorker(t, "gen-0"), startCancelWorker(t, "gen-1")}
	d := startFakeDuet(t, fakeDuet{ctx: []*cancelWorker{ctx}, gen: gens, router: "{policy: conversation}", admin: "s3cret"})
	_, hdr, _ := d.chat(t, false, "first turn", "", "X-Session-ID", "moving")
	pinned := hdr.Get("X-Duet-Gen-Worker")
	require.Equal(t, http.StatusOK, adminCall(t, http.MethodDelete, d.url+"/admin/workers/"+pinned, "s3cret", ""))
	code, hdr, body := d.chat(t, false, "second turn", "", "X-Session-ID", "moving")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, "repin", hdr.Get("X-Duet-Route"))
	require.NotEqual(t, pinned, hdr.Get("X-Duet-Gen-Worker"))
}

// Regression (issue 11): prefix matching ignored vLLM's cache_salt, so two
// tenants' identical prompts matched each other's sessions although the
// engine keeps their caches apart.
func TestCacheSaltKeepsTenantsApart(t *testing.T) {
	d := startServe(t, serveOptions{protocol: "vllm", policy: "conversation", nCtx: 2, nGen: 2})
	msgs := []message{{"system", systemPrompt}, {"user", "Where does the Danube start?"}}
	first := converseWith(t, d, msgs, `,"cache_salt":"tenant-a"`)
	require.Equal(t, http.StatusOK, first.status)
	require.Equal(t, "new", first.route)
	msgs = append(msgs, message{"assistant", first.reply}, message{"user", strings.Repeat("And where does it end? ", 20)})
	other := converseWith(t, d, msgs, `,"cache_salt":"tenant-b"`)
	require.Equal(t, "new", other.route, "another tenant's continuation is not this session")
	same := converseWith(t, d, msgs, `,"cache_salt":"tenant-a"`)
	require.Equal(t, "cached", same.route, "the same tenant's continuation is cached")
	require.Equal(t, first.ctx, same.ctx)
}
