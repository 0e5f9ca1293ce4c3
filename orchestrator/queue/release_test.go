package queue

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReleaseOnEveryPath runs many clients that cancel at random moments
// (before, while and right after admission), time out, finish, fail, panic
// and release twice, on the real clock, and checks that every admitted slot
// was released exactly once.
func TestReleaseOnEveryPath(t *testing.T) {
	cases := []struct {
		name     string
		grace    time.Duration
		fairness string
	}{
		{name: "fifo", fairness: FairnessNone},
		{name: "grace and fairness", grace: time.Millisecond, fairness: FairnessUser},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.InflightPerWorker = 2
			cfg.MaxWait = 20 * time.Millisecond
			cfg.MaxQueueLength = 40
			cfg.GracePeriod = c.grace
			cfg.Fairness = c.fairness
			reg := prometheus.NewRegistry()
			q, err := New(cfg, genPool(3), Options{Registry: reg})
			require.NoError(t, err)

			var wg sync.WaitGroup
			for g := range 48 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 42))
					for range 60 {
						stressOnce(t, q, rng)
					}
				})
			}
			wg.Wait()

			keys := []string{"a", "b"}
			require.Eventually(t, func() bool { return q.Stats("a").Held+q.Stats("b").Held == 0 },
				5*time.Second, time.Millisecond, "grace holds end")
			var admitted float64
			for _, key := range keys {
				st := q.Stats(key)
				require.Equal(t, 0, st.Admitted, key)
				require.Equal(t, 0, st.Boosted+st.Normal, key)
				require.Equal(t, 0.0, metricValue(t, reg, "duet_queue_inflight", map[string]string{"key": key}))
				q.mu.Lock()
				grants, releases := q.keys[key].grants, q.keys[key].releases
				q.mu.Unlock()
				require.Equal(t, grants, releases, "key %s: admitted == released", key)
				require.NotZero(t, grants)
				for _, class := range []string{classBoosted, classNormal} {
					for _, priority := range cfg.ClassNames() {
						admitted += metricValue(t, reg, "duet_queue_admitted_total", map[string]string{"key": key, "class": class, "priority": priority})
					}
				}
				admitted -= float64(grants)
			}
			require.Zero(t, admitted, "duet_queue_admitted_total counts each grant once")
		})
	}
}

// stressOnce is one client: acquire with a randomly ending context, then
// release along a random path.
func stressOnce(t *testing.T, q *Queue, rng *rand.Rand) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	switch rng.IntN(4) {
	case 0:
		cancel()
	case 1:
		stop := time.AfterFunc(time.Duration(rng.IntN(300))*time.Microsecond, cancel)
		defer stop.Stop()
	}
	tk := Ticket{Key: []string{"a", "b"}[rng.IntN(2)], Session: []string{"", "s1", "s2", "s3", "s4"}[rng.IntN(5)],
		User: []string{"", "u1", "u2"}[rng.IntN(3)], Tokens: rng.IntN(2000), Class: []string{"", "high", "low"}[rng.IntN(3)]}
	s, err := q.Acquire(ctx, tk)
	if err != nil {
		assert.True(t, errors.Is(err, context.Canceled) || errors.Is(err, ErrWaitTimeout) || errors.Is(err, ErrQueueFull) ||
			errors.Is(err, ErrShed), "%v", err)
		assert.Nil(t, s)
		return
	}
	hold := time.Duration(rng.IntN(200)) * time.Microsecond
	switch rng.IntN(5) {
	case 0: // finished
		time.Sleep(hold)
		s.Release(true)
	case 1: // failed, then a late second release
		s.Release(false)
		s.Release(true)
	case 2: // two goroutines release at once
		var wg sync.WaitGroup
		wg.Go(func() { s.Release(true) })
		wg.Go(func() { s.Release(false) })
		wg.Wait()
	case 3: // panic between Acquire and completion
		func() {
			defer func() { _ = recover() }()
			defer s.Release(false)
			panic("handler bug")
		}()
	default: // routing found the session; cancelled mid-answer
		s.SetSession("s5")
		time.Sleep(hold)
		s.Release(ctx.Err() == nil)
	}
}
