package sim

import (
	"context"
	"time"

	"github.com/duet-serve/duet/workers/sim/model"
)

// newTimeModel is the timing model of cfg.
func newTimeModel(cfg Config) model.Timing {
	return model.Timing{
		Scale:            cfg.TimeScale,
		PrefillRate:      cfg.PrefillTokensPerSec,
		PrefillOverhead:  cfg.PrefillOverhead,
		ITLBase:          cfg.ITLBase,
		ITLPerSeq:        cfg.ITLPerSeq,
		TransferRate:     cfg.KVTransferTokensPerSec,
		TransferOverhead: cfg.KVTransferOverhead,
	}
}

// clock is the server's source of time; tests may replace it.
type clock struct {
	now func() time.Time
}

func realClock() clock { return clock{now: time.Now} }

// sleepUntil waits until t or until ctx is done; it reports whether t was
// reached. It returns at once when t is not in the future.
func (c clock) sleepUntil(ctx context.Context, t time.Time) bool {
	d := t.Sub(c.now())
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// decodeSchedule paces tokens on a deadline schedule: token i+1 is due one
// ITL after token i was due, not after it was sent, so several tokens that
// fell due during one sleep are sent back to back and timer granularity is
// not paid per token.
type decodeSchedule struct {
	next time.Time
}

// due reports whether the next token is due at now.
func (d *decodeSchedule) due(now time.Time) bool { return !now.Before(d.next) }

// advance moves the deadline one inter-token latency on.
func (d *decodeSchedule) advance(itl time.Duration) { d.next = d.next.Add(itl) }
