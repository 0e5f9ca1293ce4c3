//go:build soak

package tests

import (
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

	stop := make(chan struct{})
	var killer sync.WaitGroup
	kills := map[string]int{}
	killer.Add(1)
	go func() { // the only writer of kills until joined
		defer killer.Done()
		rng := rand.New(rand.NewPCG(12, 4))
		for {
			select {
			case <-stop:
				return
			case <-time.After(every + time.Duration(rng.Int64N(int64(time.Second)))):
			}
			c, err := d.clusterInfo()
			if err != nil {
				continue
			}
			var live []fleetWorker
			for _, w := range c.Fleet {
				if w.State == "up" && w.PID > 0 {
					live = append(live, w)
				}
			}
			if len(live) == 0 {
				continue
			}
			w := live[rng.IntN(len(live))]
			if killWorker(w) == nil {
				kills[w.Role]++
			}
		}
	}()
	var tl tally
	runPool(n, conc, func(i int) {
		tl.add(d.client.chat(i, true, maxTokens, 2*time.Minute))
	})
	close(stop)
	killer.Wait()

	healed := d.requireHealed(t, time.Minute)
	restarts := 0
	for _, w := range healed.Fleet {
		restarts += w.Restarts
	}
	var final tally
	const finalBatch = 50
	runPool(finalBatch, 10, func(i int) {
		final.add(d.client.chat(n+i, i%2 == 0, 16, time.Minute))
	})
	row.note("%d SIGKILLs (%d ctx, %d gen), %d worker restarts, fleet healed; then %d/%d answered fully",
		kills["context"]+kills["generation"], kills["context"], kills["generation"], restarts,
		final.counts[outFull].Load(), finalBatch)
	d.finish(t, row, &tl)
	require.Positive(t, kills["context"]+kills["generation"])
	require.Equal(t, int64(finalBatch), final.counts[outFull].Load(), "after healing: %s", final.summary())
}
