package model

import (
	"sync"
	"time"
)

// Timing turns work into modelled durations. It is pure: the caller
// supplies the clock readings and does the waiting.
//
//	prefill  = prefill_overhead + uncached_tokens / prefill_tokens_per_sec
//	           (only the second term queues on the shared prefill server)
//	ITL      = itl_base + itl_per_seq * running_sequences
//	transfer = kv_transfer_overhead + missing_tokens / kv_transfer_tokens_per_sec
//
// and every duration is multiplied by time_scale and by the slow factor of
// the request's fault draw.
type Timing struct {
	Scale            float64       // time_scale: every duration is multiplied by it
	PrefillRate      float64       // prefill_tokens_per_sec
	PrefillOverhead  time.Duration // prefill_overhead
	ITLBase          time.Duration // itl_base
	ITLPerSeq        time.Duration // itl_per_seq
	TransferRate     float64       // kv_transfer_tokens_per_sec
	TransferOverhead time.Duration // kv_transfer_overhead
}

// scaled multiplies d by time_scale and slow (slow <= 0 counts as 1).
func (m Timing) scaled(d time.Duration, slow float64) time.Duration {
	if slow <= 0 {
		slow = 1
	}
	return time.Duration(float64(d) * m.Scale * slow)
}

// Prefill is the modelled time of a prefill of uncached tokens: its
// compute plus the fixed overhead.
func (m Timing) Prefill(uncached int, slow float64) time.Duration {
	return m.PrefillCompute(uncached, slow) + m.Overhead(slow)
}

// PrefillCompute is the part of a prefill that occupies the shared prefill
// server: the uncached tokens' compute.
func (m Timing) PrefillCompute(uncached int, slow float64) time.Duration {
	return m.scaled(perRate(uncached, m.PrefillRate), slow)
}

// Overhead is the fixed per-request part of a prefill (scheduling, the
// sampling step). Engines batch prefills, so it adds latency but does not
// hold the prefill server.
func (m Timing) Overhead(slow float64) time.Duration {
	return m.scaled(m.PrefillOverhead, slow)
}

// ITL is the modelled inter-token latency with running sequences.
func (m Timing) ITL(running int, slow float64) time.Duration {
	return m.scaled(m.ITLBase+time.Duration(running)*m.ITLPerSeq, slow)
}

// Transfer is the modelled time to pull tokens of KV from another worker.
func (m Timing) Transfer(tokens int, slow float64) time.Duration {
	return m.scaled(m.TransferOverhead+perRate(tokens, m.TransferRate), slow)
}

func perRate(n int, rate float64) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(float64(n) / rate * float64(time.Second))
}

// PrefillQueue is the prefill compute as one FIFO server shared by all
// concurrent prefills: a prefill starts when the previous one ends (or at
// once when idle). It is safe for concurrent use.
type PrefillQueue struct {
	// mu guards busyUntil.
	mu        sync.Mutex
	busyUntil time.Time
}

// Reserve books d of prefill compute for a request arriving at now and
// returns when its prefill starts and ends.
func (q *PrefillQueue) Reserve(now time.Time, d time.Duration) (start, end time.Time) {
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
