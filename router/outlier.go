package router

import (
	"time"
)

// Failure is a kind of worker failure that passive health counts.
type Failure int

// Failures that take a worker out of routing.
const (
	// FailureConnect: the worker could not be reached or dropped the
	// connection (refused, reset, closed before answering). Ejects at once.
	FailureConnect Failure = iota + 1
	// FailureServer: the worker answered 5xx. Ejects after
	// eject_after_5xx in a row.
	FailureServer
)

// String names the failure for logs.
func (f Failure) String() string {
	switch f {
	case FailureConnect:
		return "connect"
	case FailureServer:
		return "5xx"
	}
	return "unknown"
}

// ReportFailure is passive health (outlier ejection): it counts a failed
// call to ep and, when the failure warrants it, takes ep out of routing for
// a backoff that doubles with each ejection in a row (eject_backoff up to
// eject_max_backoff), independently of the periodic health check. After
// the backoff the worker takes requests again (half-open): a success
// resets it, another failure ejects it for longer. It returns how long ep
// is now ejected, 0 when it was not ejected by this call. Safe for
// concurrent use.
func (r *Router) ReportFailure(ep *Endpoint, f Failure) time.Duration {
	if f == FailureServer && ep.fails5xx.Add(1) < int32(r.cfg.EjectAfter5xx) {
		return 0
	}
	ep.fails5xx.Store(0)
	streak := min(ep.ejectStreak.Add(1), 16)
	backoff := min(r.cfg.EjectBackoff<<(streak-1), r.cfg.EjectMaxBackoff)
	ep.ejectedUntil.Store(r.now().Add(backoff).UnixNano())
	ep.ejections.Add(1)
	return backoff
}

// ReportSuccess tells passive health that ep answered a call: its failure
// counts reset.
func (r *Router) ReportSuccess(ep *Endpoint) {
	if ep.fails5xx.Load() != 0 {
		ep.fails5xx.Store(0)
	}
	if ep.ejectStreak.Load() != 0 {
		ep.ejectStreak.Store(0)
	}
}

// Ejected reports whether passive health keeps ep out of routing at now.
func (e *Endpoint) Ejected(now time.Time) bool { return now.UnixNano() < e.ejectedUntil.Load() }

// Ejections counts how often passive health ejected the worker.
func (e *Endpoint) Ejections() int64 { return e.ejections.Load() }

// withoutEjected drops the candidates passive health ejected, unless that
// would leave none: then every candidate stays (an ejected worker is a
// better bet than certain failure).
func withoutEjected(eps []*Endpoint, now time.Time) []*Endpoint {
	kept := eps[:0:0]
	for _, ep := range eps {
		if !ep.Ejected(now) {
			kept = append(kept, ep)
		}
	}
	if len(kept) == 0 {
		return eps
	}
	return kept
}
