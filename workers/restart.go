package workers

import (
	"fmt"
	"time"
)

// RestartPolicy says whether and when a failed worker is restarted. Like
// Nomad's restart stanza, at most Attempts restarts happen within any
// sliding window of Interval; the wait before a restart doubles with each
// restart already in the window, from Delay up to MaxDelay, and is shortened
// by a random fraction of up to Jitter. Once the limit is reached the worker
// stays down (State failed) until duet restarts.
type RestartPolicy struct {
	// Attempts is the number of restarts allowed within Interval (default 5;
	// 0 never restarts).
	Attempts int `mapstructure:"attempts" yaml:"attempts" help:"restarts allowed within interval (0: never restart)"`
	// Interval is the sliding window Attempts counts over (default 60s).
	Interval time.Duration `mapstructure:"interval" yaml:"interval" help:"sliding window the restart attempts are counted over"`
	// Delay is the wait before the first restart in the window (default 1s).
	Delay time.Duration `mapstructure:"delay" yaml:"delay" help:"wait before the first restart; doubles with each restart in the window"`
	// MaxDelay caps the doubled wait (default 30s).
	MaxDelay time.Duration `mapstructure:"max_delay" yaml:"max_delay" help:"upper bound of the restart wait"`
	// Jitter is the largest fraction, in [0, 1], by which a wait is randomly
	// shortened so that workers that failed together do not restart in
	// lockstep (default 0.2).
	Jitter float64 `mapstructure:"jitter" yaml:"jitter" help:"random fraction (0..1) a restart wait is shortened by"`
}

// DefaultRestartPolicy returns the default policy: 5 restarts per minute,
// waits 1s, 2s, 4s, ... up to 30s, 20% jitter.
func DefaultRestartPolicy() RestartPolicy {
	return RestartPolicy{
		Attempts: 5,
		Interval: time.Minute,
		Delay:    time.Second,
		MaxDelay: 30 * time.Second,
		Jitter:   0.2,
	}
}

// RestartDecision is the outcome of DecideRestart.
type RestartDecision struct {
	// Restart is true when the worker should be restarted after Wait.
	Restart bool
	// Wait is how long to wait before restarting (0 when Restart is false).
	Wait time.Duration
	// Reason explains a refusal, for the worker's LastError; empty otherwise.
	Reason string
}

// DecideRestart decides whether a worker that failed at now is restarted.
// history holds the times of its earlier restarts (any order; entries older
// than the policy's Interval are ignored) and rnd is a uniform random number
// in [0, 1) for the jitter. It is a pure function.
func DecideRestart(p RestartPolicy, history []time.Time, now time.Time, rnd float64) RestartDecision {
	if p.Attempts <= 0 {
		return RestartDecision{Reason: "restarts disabled (restart.attempts is 0)"}
	}
	recent := countSince(history, now.Add(-p.Interval))
	if recent >= p.Attempts {
		return RestartDecision{Reason: fmt.Sprintf("restart limit reached: %d restarts within %s", recent, p.Interval)}
	}
	return RestartDecision{Restart: true, Wait: backoff(p, recent, rnd)}
}

// countSince counts the entries of history after since.
func countSince(history []time.Time, since time.Time) int {
	n := 0
	for _, t := range history {
		if t.After(since) {
			n++
		}
	}
	return n
}

// pruneHistory drops the entries of history that DecideRestart would ignore
// at now, keeping the slice bounded.
func pruneHistory(history []time.Time, now time.Time, interval time.Duration) []time.Time {
	since := now.Add(-interval)
	kept := history[:0]
	for _, t := range history {
		if t.After(since) {
			kept = append(kept, t)
		}
	}
	return kept
}

// backoff is Delay * 2^n capped at MaxDelay, shortened by up to Jitter.
func backoff(p RestartPolicy, n int, rnd float64) time.Duration {
	d := p.Delay
	for i := 0; i < n && d < p.MaxDelay; i++ {
		d *= 2
	}
	if d > p.MaxDelay {
		d = p.MaxDelay
	}
	return d - time.Duration(float64(d)*p.Jitter*rnd)
}
