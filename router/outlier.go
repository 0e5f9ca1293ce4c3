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
// the backoff the worker is half-open: Route lets one request at a time
// through as a probe; a success closes it, another failure ejects it for
// longer. A failure reported while ep is ejected (a call that was in flight
// when it was, or one sent because every worker was ejected) is the same
// incident and changes nothing: the streams one crash cuts are one
// ejection, not as many in a row. It returns how long ep is now ejected, 0
// when it was not ejected by this call. An ejection leaves the worker's
// other calls in flight alone: one failed call does not doom them (a dead
// worker's fail on their own, at once), and measured under per-request
// faults, cancelling them failed several times more requests than it
// saved. Safe for concurrent use.
func (r *Router) ReportFailure(ep *Endpoint, f Failure) time.Duration {
	if ep.Ejected(r.now()) {
		return 0
	}
	if f == FailureServer && ep.fails5xx.Add(1) < int32(r.cfg.EjectAfter5xx) {
		return 0
	}
	ep.fails5xx.Store(0)
	streak := min(ep.ejectStreak.Add(1), 16)
	backoff := min(r.cfg.EjectBackoff<<(streak-1), r.cfg.EjectMaxBackoff)
	ep.ejectedUntil.Store(r.now().Add(backoff).UnixNano())
	ep.probeUntil.Store(0)
	ep.ejections.Add(1)
	return backoff
}

// ReportSuccess tells passive health that ep answered a call: its failure
// counts reset and a half-open worker is back in routing.
func (r *Router) ReportSuccess(ep *Endpoint) {
	if ep.fails5xx.Load() != 0 {
		ep.fails5xx.Store(0)
	}
	if ep.ejectStreak.Load() != 0 {
		ep.ejectStreak.Store(0)
		ep.probeUntil.Store(0)
	}
}

// ReportInconclusive tells passive health that a call to ep ended without
// saying anything about it (cancelled by the client, timed out, no free
// connection): a half-open probe it carried is over, and another request
// may probe.
func (r *Router) ReportInconclusive(ep *Endpoint) { ep.probeUntil.Store(0) }

// Ejected reports whether passive health keeps ep out of routing at now.
func (e *Endpoint) Ejected(now time.Time) bool { return now.UnixNano() < e.ejectedUntil.Load() }

// Ejections counts how often passive health ejected the worker.
func (e *Endpoint) Ejections() int64 { return e.ejections.Load() }

// halfOpen reports whether ep's ejection ended but no call has succeeded
// since: only a probe may go to it.
func (e *Endpoint) halfOpen(now time.Time) bool { return e.ejectStreak.Load() > 0 && !e.Ejected(now) }

// claimProbe makes the caller the one request probing a half-open ep,
// until a report on ep or, if none comes, until window has passed.
func (e *Endpoint) claimProbe(now time.Time, window time.Duration) bool {
	held := e.probeUntil.Load()
	return held <= now.UnixNano() && e.probeUntil.CompareAndSwap(held, now.Add(window).UnixNano())
}

// routable drops the candidates passive health keeps out: ejected ones,
// and half-open ones whose probe another request holds. A half-open
// candidate kept is claimed as this request's probe (probes lists them;
// the caller gives back the claims it does not use). When nothing would be
// left every candidate stays (an ejected worker is a better bet than
// certain failure).
func (r *Router) routable(eps []*Endpoint, now time.Time, probes []*Endpoint) (kept, claimed []*Endpoint) {
	kept = eps[:0:0]
	for _, ep := range eps {
		switch {
		case !ep.halfOpen(now) && !ep.Ejected(now):
			kept = append(kept, ep)
		case ep.halfOpen(now) && ep.claimProbe(now, r.cfg.EjectMaxBackoff):
			kept, probes = append(kept, ep), append(probes, ep)
		}
	}
	if len(kept) == 0 {
		return eps, probes
	}
	return kept, probes
}

// unclaimProbes gives back the probe claims of the candidates not chosen.
func unclaimProbes(probes []*Endpoint, ctx, gen *Endpoint) {
	for _, ep := range probes {
		if ep != ctx && ep != gen {
			ep.probeUntil.Store(0)
		}
	}
}
