package sim

import (
	"context"
	"sync"
	"time"
)

// timeModel turns work into modelled durations. It is pure: the caller
// supplies the clock readings and does the waiting.
//
//	prefill  = prefill_overhead + uncached_tokens / prefill_tokens_per_sec
//	           (only the second term queues on the shared prefill server)
//	ITL      = itl_base + itl_per_seq * running_sequences
//	transfer = kv_transfer_overhead + missing_tokens / kv_transfer_tokens_per_sec
//
// and every duration is multiplied by time_scale and by the slow factor of
// the request's fault draw.
type timeModel struct {
	scale           float64
	prefillRate     float64 // tokens/s
	prefillOverhead time.Duration
	itlBase         time.Duration
	itlPerSeq       time.Duration
	xferRate        float64 // tokens/s
	xferOverhead    time.Duration
}

func newTimeModel(cfg Config) timeModel {
	return timeModel{
		scale:           cfg.TimeScale,
		prefillRate:     cfg.PrefillTokensPerSec,
		prefillOverhead: cfg.PrefillOverhead,
		itlBase:         cfg.ITLBase,
		itlPerSeq:       cfg.ITLPerSeq,
		xferRate:        cfg.KVTransferTokensPerSec,
		xferOverhead:    cfg.KVTransferOverhead,
	}
}

// scaled multiplies d by time_scale and slow (slow <= 0 counts as 1).
func (m timeModel) scaled(d time.Duration, slow float64) time.Duration {
	if slow <= 0 {
		slow = 1
	}
	return time.Duration(float64(d) * m.scale * slow)
}

// prefill is the modelled time of a prefill of uncached tokens: its
// compute plus the fixed overhead.
func (m timeModel) prefill(uncached int, slow float64) time.Duration {
	return m.prefillCompute(uncached, slow) + m.overhead(slow)
}

// prefillCompute is the part of a prefill that occupies the shared prefill
// server: the uncached tokens' compute.
func (m timeModel) prefillCompute(uncached int, slow float64) time.Duration {
	return m.scaled(perRate(uncached, m.prefillRate), slow)
}

// overhead is the fixed per-request part of a prefill (scheduling, the
// sampling step). Engines batch prefills, so it adds latency but does not
// hold the prefill server.
func (m timeModel) overhead(slow float64) time.Duration {
	return m.scaled(m.prefillOverhead, slow)
}

// itl is the modelled inter-token latency with running sequences.
func (m timeModel) itl(running int, slow float64) time.Duration {
	return m.scaled(m.itlBase+time.Duration(running)*m.itlPerSeq, slow)
}

// transfer is the modelled time to pull tokens of KV from another worker.
func (m timeModel) transfer(tokens int, slow float64) time.Duration {
	return m.scaled(m.xferOverhead+perRate(tokens, m.xferRate), slow)
}

func perRate(n int, rate float64) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(float64(n) / rate * float64(time.Second))
}

// prefillQueue is the prefill compute as one FIFO server shared by all
// concurrent prefills: a prefill starts when the previous one ends (or at
// once when idle). It is safe for concurrent use.
type prefillQueue struct {
	// mu guards busyUntil.
	mu        sync.Mutex
	busyUntil time.Time
}

// reserve books d of prefill compute for a request arriving at now and
// returns when its prefill starts and ends.
func (q *prefillQueue) reserve(now time.Time, d time.Duration) (start, end time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	start = now
	if q.busyUntil.After(now) {
		start = q.busyUntil
	}
	end = start.Add(d)
	q.busyUntil = end
	return start, end
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
