//go:build soak

package tests

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// soakKill (issue 12 a): SOAK_REQUESTS streaming requests (default 1,000),
// SOAK_CONCURRENCY at a time (64), each ~5 s long (100 tokens at a 50 ms
// ITL), while a random live ctx or gen worker is SIGKILLed every 2-3 s
// (SOAK_KILL_EVERY sets the lower bound). Every request must end (a full
// answer, an error event or an error status); then the fleet must heal and a
// final batch must be answered in full.
func soakKill(t *testing.T, row *soakRow) {
	n, conc := soakEnv(t, "SOAK_REQUESTS", 1000), soakEnv(t, "SOAK_CONCURRENCY", 64)
	every := soakEnvDuration(t, "SOAK_KILL_EVERY", 2*time.Second)
	const maxTokens = 100
	d := startSoak(t, soakOptions{simArgs: []string{"--itl-base", "50ms"}})

	ctx, stop := context.WithCancel(context.Background())
	k := startKiller(ctx, d, every, time.Second, rand.New(rand.NewPCG(12, 4)))
	var tl tally
	runPool(n, conc, func(i int) {
		tl.add(d.client.chat(i, true, maxTokens, 2*time.Minute))
	})
	stop()
	kills := k.wait()

	const finalBatch = 50
	restarts, final := d.healThenAnswer(t, finalBatch, 10, func(i int) (outcome, string) {
		return d.client.chat(n+i, i%2 == 0, 16, time.Minute)
	})
	row.note("%d SIGKILLs (%d ctx, %d gen), %d worker restarts, fleet healed; then %d/%d answered fully",
		kills["context"]+kills["generation"], kills["context"], kills["generation"], restarts,
		final.counts[outFull].Load(), finalBatch)
	d.finish(t, row, &tl)
	require.Positive(t, kills["context"]+kills["generation"])
	require.Equal(t, int64(finalBatch), final.counts[outFull].Load(), "after healing: %s", final.summary())
}

// healThenAnswer waits for the fleet to heal, then sends n requests, conc
// at a time, with chat; it returns the worker restarts and the outcomes.
func (d *soakDuet) healThenAnswer(t *testing.T, n, conc int, chat func(i int) (outcome, string)) (int, *tally) {
	t.Helper()
	healed := d.requireHealed(t, time.Minute)
	restarts := 0
	for _, w := range healed.Fleet {
		restarts += w.Restarts
	}
	var final tally
	runPool(n, conc, func(i int) { final.add(chat(i)) })
	return restarts, &final
}

// killer SIGKILLs a random live worker of a soak fleet, again and again,
// from its own goroutine until its context ends.
type killer struct {
	done sync.WaitGroup
	// kills counts the SIGKILLs by role; written by the killer's goroutine
	// only, read after wait.
	kills map[string]int
}

// startKiller starts killing: every period plus a random part of jitter
// (0: none), drawn from rng, it SIGKILLs a random live worker of d. It
// stops when ctx ends; wait joins it. rng is the killer's alone.
func startKiller(ctx context.Context, d *soakDuet, every, jitter time.Duration, rng *rand.Rand) *killer {
	k := &killer{kills: map[string]int{}}
	k.done.Add(1)
	go func() {
		defer k.done.Done()
		for {
			wait := every
			if jitter > 0 {
				wait += time.Duration(rng.Int64N(int64(jitter)))
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			if role, ok := killOne(d, rng); ok {
				k.kills[role]++
			}
		}
	}()
	return k
}

// wait joins the killer, whose context must be ended, and returns its
// kills by role ("context", "generation").
func (k *killer) wait() map[string]int {
	k.done.Wait()
	return k.kills
}

// killOne SIGKILLs a worker of d picked with rng among those up, and
// returns its role; false when none was up or the kill failed.
func killOne(d *soakDuet, rng *rand.Rand) (role string, ok bool) {
	c, err := d.clusterInfo()
	if err != nil {
		return "", false
	}
	var live []fleetWorker
	for _, w := range c.Fleet {
		if w.State == "up" && w.PID > 0 {
			live = append(live, w)
		}
	}
	if len(live) == 0 {
		return "", false
	}
	w := live[rng.IntN(len(live))]
	if killWorker(w) != nil {
		return "", false
	}
	return w.Role, true
}
