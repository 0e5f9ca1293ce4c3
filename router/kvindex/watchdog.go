package kvindex

// State is where the router's view of a worker's cache comes from now, as
// duet_cache_signal{worker,state} and /cluster_info show it.
type State string

// States of a worker's cache signal.
const (
	// StateEstimate: the worker publishes no KV events; the estimate is
	// used.
	StateEstimate State = "estimate"
	// StateEvents: the worker's KV events are used.
	StateEvents State = "events"
	// StateFallback: the worker publishes KV events, but they stopped
	// agreeing with the cached tokens the engine reports (or were lost, or
	// use another block size): the estimate is used until they agree again.
	StateFallback State = "fallback"
)

// States lists every State, for metrics.
var States = []State{StateEstimate, StateEvents, StateFallback}

// The watchdog's thresholds. An observation is one request whose context
// phase ran on the worker, where either the view expected or the engine
// reported cached tokens (a prompt new to both says nothing).
const (
	// watchWindow is how many recent observations of the events view
	// count.
	watchWindow = 8
	// demoteAfter disagreements within the window demote the events.
	demoteAfter = 3
	// estimateLostAfter observations in a row where the estimate expected
	// at least estimateLostBlocks blocks and the engine reported none mean
	// the engine's cache was emptied behind duet's back (a restart at the
	// same address): the estimate is emptied.
	estimateLostAfter  = 3
	estimateLostBlocks = 4
)

// watchdog judges the events view against the engine's reports. Its Cache
// guards it.
type watchdog struct {
	// window holds the last observations of the events view (true: it
	// disagreed), n of them, next the slot to write.
	window [watchWindow]bool
	n      int
	next   int
	// demoted says why the events are not trusted ("" when they are).
	demoted string
	// estimateMisses counts observations in a row where the estimate
	// expected blocks the engine did not report.
	estimateMisses int
}

func (w *watchdog) trusted() bool { return w.demoted == "" }

// record adds one observation of the events view.
func (w *watchdog) record(disagreed bool) {
	w.window[w.next] = disagreed
	w.next = (w.next + 1) % watchWindow
	w.n = min(w.n+1, watchWindow)
}

func (w *watchdog) disagreements() int {
	d := 0
	for i := range w.n {
		if w.window[i] {
			d++
		}
	}
	return d
}

// demote stops trusting the events, for reason, and restarts the window:
// they are promoted again once a whole window agrees.
func (w *watchdog) demote(reason string) {
	w.demoted = reason
	w.n, w.next = 0, 0
}

// Change is a change of a worker's cache signal, for the caller to log once
// and show.
type Change struct {
	From, To State
	// Reason says why (empty when nothing changed).
	Reason string
}

// Changed reports whether the signal changed.
func (c Change) Changed() bool { return c.From != c.To }

// State returns where the router's view of the worker's cache comes from
// now, and why when it is a fallback.
func (c *Cache) State() (State, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dog.demoted == "" {
		return c.state(), c.blockNote
	}
	return c.state(), c.dog.demoted
}

func (c *Cache) state() State {
	switch {
	case c.events == nil:
		return StateEstimate
	case c.dog.trusted():
		return StateEvents
	default:
		return StateFallback
	}
}

// Observe compares what each view expected of one request, p (taken by
// Match when it was routed to this worker), with the cached tokens the
// engine reported for it (reported >= 0) for a prompt of promptTokens.
// Engines report whole blocks and recompute at least the prompt's last
// token, so a view that holds n blocks expects min(n, (promptTokens-1) /
// BlockSize) blocks. It returns the change of signal it caused.
func (c *Cache) Observe(p Prediction, promptTokens, reported int) Change {
	if reported < 0 || promptTokens < 1 {
		return Change{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	from := c.state()
	limit := (promptTokens - 1) / c.blockSize
	got := reported / c.blockSize
	c.watchEstimate(min(p.Estimate, limit), got)
	if c.events != nil && p.Events >= 0 {
		want := min(p.Events, limit)
		if want > 0 || got > 0 {
			c.dog.record(want != got)
			switch {
			case c.dog.trusted() && c.dog.disagreements() >= demoteAfter:
				c.dog.demote("its KV events disagree with the cached tokens it reports")
			case !c.dog.trusted() && !c.mismatch && c.dog.n == watchWindow && c.dog.disagreements() == 0:
				c.dog.demoted = ""
			}
		}
	}
	ch := Change{From: from, To: c.state()}
	if ch.Changed() {
		ch.Reason = c.dog.demoted
		if ch.Reason == "" {
			ch.Reason = "its KV events agree with the cached tokens it reports again"
		}
	}
	return ch
}

// watchEstimate empties the estimate after the engine reported none of
// what it expected, estimateLostAfter times in a row.
func (c *Cache) watchEstimate(want, got int) {
	switch {
	case want >= estimateLostBlocks && got == 0:
		c.dog.estimateMisses++
	case want > 0 || got > 0:
		c.dog.estimateMisses = 0
	}
	if c.dog.estimateMisses >= estimateLostAfter {
		c.forgetEstimate()
		c.dog.estimateMisses = 0
	}
}
