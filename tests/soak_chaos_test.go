//go:build soak

package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/duet-serve/duet/tests/loadgen"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/stretchr/testify/require"
)

// soakChaos (chaos-bench) measures what worker crashes cost clients: a
// multi-turn `duet bench` workload (tests/loadgen) runs against 4 ctx + 4
// gen sims for SOAK_CHAOS_DURATION (default 10m), SOAK_CHAOS_CONCURRENCY
// sessions in flight (32), while a random live worker is SIGKILLed every
// SOAK_CHAOS_KILL_EVERY (30s; "0" or "off": never, the fault-free
// baseline) and the fleet restarts it. SOAK_CHAOS_MIGRATIONS (2) is
// orchestrator.max_migrations; 0 gives the behaviour without migration to
// compare against. Sessions have ~5 turns a second of think time apart,
// each answer 200 tokens at a ~25 ms ITL (~5 s), so that kills land
// mid-stream; the workload and the kills follow fixed seeds, so runs with
// other settings meet the same sessions and kill sequence. The row's notes
// give the share of requests that failed and the TTFT and latency of the
// others; then the fleet must heal and a final batch must be answered in
// full.
func soakChaos(t *testing.T, row *soakRow) {
	cc := chaosEnv(t)
	row.note("max_migrations %d, %s, %s of load, %d sessions in flight", cc.migrations, cc.killDesc(), cc.duration, cc.concurrency)
	d := startSoak(t, soakOptions{nCtx: 4, nGen: 4, simArgs: []string{"--itl-base", "25ms"},
		orchestrator: []string{fmt.Sprintf("max_migrations: %d", cc.migrations)}})
	tok, err := tokenizer.New(tokenizer.Defaults())
	require.NoError(t, err)

	// The kills stop when the load stops sending; the answers in flight
	// then finish without them.
	ctx, stop := context.WithTimeout(context.Background(), cc.duration)
	defer stop()
	kills := map[string]int{}
	var k *killer
	if cc.every > 0 {
		k = startKiller(ctx, d, cc.every, 0, rand.New(rand.NewPCG(7, 30)))
	}
	tr := loadgen.NewTransport(cc.concurrency)
	res, err := loadgen.Run(context.Background(), cc.workload(d.url), loadgen.Options{Tokenizer: tok, HTTPClient: &http.Client{Transport: tr}})
	tr.CloseIdleConnections() // duet would count them as live connections
	stop()
	if k != nil {
		kills = k.wait()
	}
	require.NoError(t, err)

	var tl tally
	var ttft, latency []float64
	var requests, sessions int
	for i := range res.Records {
		r := &res.Records[i]
		if r.Phase != loadgen.PhaseProfiling {
			continue
		}
		requests++
		if r.TurnIndex == 0 {
			sessions++
		}
		o, detail := chaosOutcome(r)
		tl.add(o, detail)
		if o != outFull {
			continue
		}
		if v, ok := r.TTFT(); ok {
			ttft = append(ttft, float64(v))
		}
		if v, ok := r.Latency(); ok {
			latency = append(latency, float64(v))
		}
	}
	failed := requests - int(tl.counts[outFull].Load())
	first, lat := loadgen.Summarize(ttft), loadgen.Summarize(latency)
	row.note("%s requests in %s sessions, %.2f%% ended in an error (%s); answered fully: TTFT p50 %s, p99 %s, max %s; latency p50 %s, p99 %s, max %s",
		num(int64(requests)), num(int64(sessions)), 100*float64(failed)/float64(max(requests, 1)), tl.summary(),
		millis(first.P50), millis(first.P99), millis(first.Max), millis(lat.P50), millis(lat.P99), millis(lat.Max))

	const finalBatch = 16
	restarts, final := d.healThenAnswer(t, finalBatch, 8, func(i int) (outcome, string) {
		return d.client.chat(i, true, 16, time.Minute)
	})
	migrated, not := d.migrations(t)
	row.note("%d SIGKILLs (%d ctx, %d gen), %d worker restarts, fleet healed, then %d/%d answered fully; streams migrated %s, not %s",
		kills["context"]+kills["generation"], kills["context"], kills["generation"], restarts,
		final.counts[outFull].Load(), finalBatch, num(int64(migrated)), num(int64(sum(not))))

	d.finish(t, row, &tl)
	if cc.every > 0 {
		require.Positive(t, kills["context"]+kills["generation"], "no worker killed")
	} else {
		require.Zero(t, failed, "without kills every request is answered in full: %s", tl.summary())
	}
	require.Equal(t, int64(finalBatch), final.counts[outFull].Load(), "after healing: %s", final.summary())
}

// chaosConfig is the chaos-bench's configuration, from the environment.
type chaosConfig struct {
	duration    time.Duration // SOAK_CHAOS_DURATION: how long requests are sent
	every       time.Duration // SOAK_CHAOS_KILL_EVERY: 0 for no kills
	migrations  int           // SOAK_CHAOS_MIGRATIONS: orchestrator.max_migrations
	concurrency int           // SOAK_CHAOS_CONCURRENCY: sessions in flight
}

// chaosEnv reads and checks the SOAK_CHAOS_* variables.
func chaosEnv(t *testing.T) chaosConfig {
	t.Helper()
	cc := chaosConfig{
		duration:    soakEnvDuration(t, "SOAK_CHAOS_DURATION", 10*time.Minute),
		every:       30 * time.Second,
		migrations:  2,
		concurrency: soakEnv(t, "SOAK_CHAOS_CONCURRENCY", 32),
	}
	switch v := os.Getenv("SOAK_CHAOS_KILL_EVERY"); v {
	case "":
	case "0", "off":
		cc.every = 0
	default:
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf(`SOAK_CHAOS_KILL_EVERY: must be a positive duration, or "0" or "off" for no kills, got %q`, v)
		}
		cc.every = d
	}
	if v := os.Getenv("SOAK_CHAOS_MIGRATIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("SOAK_CHAOS_MIGRATIONS: must be an integer >= 0 (0: migration off), got %q", v)
		}
		cc.migrations = n
	}
	if cc.every >= cc.duration {
		t.Fatalf("SOAK_CHAOS_KILL_EVERY: %s leaves no kill within SOAK_CHAOS_DURATION %s", cc.every, cc.duration)
	}
	return cc
}

func (cc chaosConfig) killDesc() string {
	if cc.every == 0 {
		return "no kills"
	}
	return "a SIGKILL every " + cc.every.String()
}

// workload is the bench against url: streaming multi-turn chat sessions
// with the session header, ignore_eos so that every answer has its
// max_completion_tokens.
func (cc chaosConfig) workload(url string) loadgen.Config {
	cfg := loadgen.Defaults()
	cfg.URLs, cfg.Model, cfg.Streaming = []string{url}, soakModel, true
	cfg.TurnsMean, cfg.TurnsStddev = 5, 1
	cfg.TurnDelayMean, cfg.TurnDelayStddev = 1000, 300 // ms
	cfg.SharedSystemPromptLength = 300
	cfg.ISL, cfg.ISLStddev = 150, 30
	cfg.OSL = 200 // all alike: a latency above ~5 s is a crash's cost
	cfg.ExtraInputs = []loadgen.ExtraInput{{Key: "ignore_eos", Value: []byte("true")}}
	cfg.Concurrency, cfg.Duration = cc.concurrency, cc.duration
	cfg.RequestTimeout, cfg.GracePeriod = 2*time.Minute, 2*time.Minute
	cfg.Seed, cfg.SeedSet = 12, true
	return cfg
}

// chaosOutcome says how a bench request ended, in the soak's outcomes.
func chaosOutcome(r *loadgen.Record) (outcome, string) {
	e := r.Err
	switch {
	case e == nil && r.HasUsage && r.CompletionTokens == r.RequestedOutputTokens:
		return outFull, ""
	case e == nil:
		return outBroken, fmt.Sprintf("turn %d: answered with %d of %d tokens (usage %t)", r.TurnIndex, r.CompletionTokens, r.RequestedOutputTokens, r.HasUsage)
	case r.Cancelled:
		return outHung, fmt.Sprintf("turn %d: unfinished when the run's grace period ended", r.TurnIndex)
	case e.Type == loadgen.ErrTimeout:
		return outHung, fmt.Sprintf("turn %d: %s", r.TurnIndex, e.Message)
	case e.Type == loadgen.ErrInStream:
		return outErrorEvent, fmt.Sprintf("turn %d: error event: %s", r.TurnIndex, e.Message)
	case e.Code != nil: // a non-2xx status; its body must be an OpenAI error
		o, detail := judgeBody(*e.Code, []byte(e.Message), 0)
		return o, fmt.Sprintf("turn %d: %s", r.TurnIndex, detail)
	case e.Type == loadgen.ErrConnection:
		return outClosed, fmt.Sprintf("turn %d: %s", r.TurnIndex, e.Message)
	}
	return outBroken, fmt.Sprintf("turn %d: %s: %s", r.TurnIndex, e.Type, e.Message)
}

// millis writes a duration in nanoseconds rounded to the millisecond.
func millis(ns float64) string { return time.Duration(ns).Round(time.Millisecond).String() }
