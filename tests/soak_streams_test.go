//go:build soak

package tests

import (
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// soakStreams (issue 12 d): SOAK_STREAMS streams (default 5,000) opened
// over ~5 s and held open together: 64 tokens each at a ~0.6 s ITL (0.5 s
// plus 50 µs per running sequence), so each lasts ~40 s on the 2 gen
// workers. Every stream must be answered in full; the peak of streams open
// at once (first event read, [DONE] not yet) is reported, with duet's
// goroutines and memory at that peak.
func soakStreams(t *testing.T, row *soakRow) {
	n := soakEnv(t, "SOAK_STREAMS", 5000)
	itl := soakEnvDuration(t, "SOAK_STREAM_ITL", 500*time.Millisecond)
	const maxTokens = 64
	// Idle and first-event limits of a minute: the scenario measures
	// holding 5,000 streams, not latency; beside make test, 2,500 streams
	// per gen worker on 2 shared cores saw gaps over the default 10 s.
	d := startSoak(t, soakOptions{simArgs: []string{"--itl-base", itl.String()}, limit: time.Minute, total: 10 * time.Minute})

	var open, peak atomic.Int64
	var peakGoroutines atomic.Int64
	stop := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Add(1)
	go func() { // duet's goroutines while the streams are open
		defer watcher.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if p, err := probeDuet(d.url); err == nil && int64(p.goroutines) > peakGoroutines.Load() {
					peakGoroutines.Store(int64(p.goroutines))
				}
			}
		}
	}()
	var tl tally
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * time.Millisecond)); wait > 0 { // 1,000 a second
			time.Sleep(wait)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tl.add(d.client.openStream(i, maxTokens, 5*time.Minute, &open, &peak))
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(stop)
	watcher.Wait()
	row.note("%s streams of %d tokens, peak %s open at once, all done in %s; duet's goroutines peaked at %s",
		num(int64(n)), maxTokens, num(peak.Load()), took.Round(time.Second), num(peakGoroutines.Load()))
	d.finish(t, row, &tl)
	require.Equal(t, int64(n), tl.counts[outFull].Load(), "every stream answered in full: %s", tl.summary())
}

// openStream runs one stream like chat, counting it in open from its
// first event to its end, and recording the most open at once in peak.
func (c *soakClient) openStream(i, maxTokens int, deadline time.Duration, open, peak *atomic.Int64) (outcome, string) {
	var counted *countingReader
	defer func() {
		if counted != nil && counted.started {
			open.Add(-1)
		}
	}()
	return c.send(i, true, maxTokens, deadline, func(body io.Reader) io.Reader {
		counted = &countingReader{r: body, first: func() {
			now := open.Add(1)
			for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
			}
		}}
		return counted
	})
}

// countingReader calls first once, when the first bytes of the body
// arrive (duet sends nothing before the first event).
type countingReader struct {
	r       io.Reader
	first   func()
	started bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && !c.started {
		c.started = true
		c.first()
	}
	return n, err
}
