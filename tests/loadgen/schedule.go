package loadgen

import (
	"context"
	"sync"
	"time"
)

// The load modes. Each starts sessions until the source or the budget runs
// out and returns once every session it started has ended. A session holds
// its concurrency slot from its first turn to its last answer, think time
// included: --concurrency counts sessions, as in aiperf's multi-turn mode.

// burst keeps concurrency sessions in flight, each sending its turns after
// their think times (aiperf's concurrency_burst).
func (p *phase) burst(ctx context.Context, concurrency int) {
	slots := newSlots(concurrency)
	for p.acquire(slots) {
		s, ok := p.src.next()
		if !ok {
			release(slots)
			break
		}
		p.start(ctx, s, slots, p.thinkTime)
	}
	p.wg.Wait()
}

// start runs session s in its own goroutine (joined by p.wg), which frees
// its concurrency slot when the session ends.
func (p *phase) start(ctx context.Context, s *Session, slots chan struct{}, g gate) {
	ss := p.begin(s)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer release(slots)
		p.run(ctx, ss, g)
	}()
}

// thinkTime lets turn k go once its delay has passed since the previous
// answer.
func (p *phase) thinkTime(k int, t *Turn, prevEnd time.Time) bool {
	if k == 0 {
		return !p.stopped()
	}
	return p.sleepUntil(prevEnd.Add(t.Delay))
}

// rate sends requests at rate per second with poisson or constant
// inter-arrival times. Each arrival sends one turn that is ready: a
// continuation whose think time has passed if there is one, else the first
// turn of a new session (as aiperf issues credits); concurrency > 0 caps the
// sessions in flight.
func (p *phase) rate(ctx context.Context, rate float64, pattern string, concurrency int) {
	c := &credits{}
	quit := make(chan struct{})
	var dispatcher sync.WaitGroup
	dispatcher.Add(1)
	go func() {
		defer dispatcher.Done()
		p.dispatch(c, rate, pattern, quit)
	}()
	slots := newSlots(concurrency)
	cont := func(k int, t *Turn, prevEnd time.Time) bool {
		if k == 0 {
			return true // the feeder took this turn's credit
		}
		return p.sleepUntil(prevEnd.Add(t.Delay)) && c.wait(p, true)
	}
	for p.acquire(slots) {
		if !c.wait(p, false) {
			release(slots)
			break
		}
		s, ok := p.src.next()
		if !ok {
			release(slots)
			break
		}
		p.start(ctx, s, slots, cont)
	}
	p.wg.Wait()
	close(quit)
	dispatcher.Wait()
}

// dispatch grants one credit per arrival until quit or the phase stops.
func (p *phase) dispatch(c *credits, rate float64, pattern string, quit <-chan struct{}) {
	clk := p.r.clock
	arr := newArrivals(rate, pattern, p.r.cfg.Seed)
	next := clk.now()
	for {
		fired, stop := clk.after(clk.until(next))
		select {
		case <-fired:
		case <-quit:
			stop()
			return
		case <-p.budget.stop:
			stop()
			return
		case <-p.cancelled:
			stop()
			return
		}
		c.grant()
		next = nextArrival(next, clk.now(), arr.gap())
	}
}

// credits hands rate arrivals to waiting turns, continuations first. An
// arrival with no waiter is kept until the next waiter comes (at most one).
type credits struct {
	mu      sync.Mutex // guards every field
	cont    []*waiter
	fresh   []*waiter
	pending bool
}

type waiter struct {
	ch   chan struct{} // receives the credit
	gone bool          // the waiter gave up; guarded by credits.mu
}

// wait blocks until a credit is granted; false if the phase stopped first.
func (c *credits) wait(p *phase, continuation bool) bool {
	w := &waiter{ch: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.pending {
		c.pending = false
		c.mu.Unlock()
		return !p.stopped()
	}
	if continuation {
		c.cont = append(c.cont, w)
	} else {
		c.fresh = append(c.fresh, w)
	}
	c.mu.Unlock()
	select {
	case <-w.ch:
		return !p.stopped()
	case <-p.budget.stop:
	case <-p.cancelled:
	}
	c.mu.Lock()
	w.gone = true
	c.mu.Unlock()
	return false
}

func (c *credits) grant() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range []*[]*waiter{&c.cont, &c.fresh} {
		for len(*q) > 0 {
			w := (*q)[0]
			*q = (*q)[1:]
			if !w.gone {
				w.ch <- struct{}{}
				return
			}
		}
	}
	c.pending = true
}

// userCentric runs users users sharing rate requests per second: each user
// sends a turn every users/rate seconds (sooner never; later when the
// previous answer took longer, re-basing its schedule), and a user whose
// session ends is replaced by a new user with a new id. Users start evenly
// staggered over one gap, and the first wave's sessions are shortened so
// their ends spread over a session length (aiperf's "virtual history").
func (p *phase) userCentric(ctx context.Context, users int, rate float64, concurrency int) {
	gap := time.Duration(float64(users) / rate * float64(time.Second))
	slots := newSlots(concurrency)
	start := p.r.clock.now()
	for u := 0; u < users; u++ {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.user(ctx, u, users, start.Add(gap*time.Duration(u)/time.Duration(users)), gap, slots)
		}()
	}
	p.wg.Wait()
}

func (p *phase) user(ctx context.Context, u, users int, at time.Time, gap time.Duration, slots chan struct{}) {
	for wave := 0; ; wave++ {
		if !p.sleepUntil(at) || !p.acquire(slots) {
			return
		}
		s, ok := p.src.next()
		if !ok {
			release(slots)
			return
		}
		ss := p.begin(s)
		if wave == 0 {
			ss.turns = (len(s.Turns)*(u+1) + users - 1) / users
		}
		end := p.run(ctx, ss, func(k int, _ *Turn, prevEnd time.Time) bool {
			if k > 0 {
				at = at.Add(gap)
				if prevEnd.After(at) {
					at = prevEnd
				}
			}
			return p.sleepUntil(at)
		})
		release(slots)
		at = at.Add(gap)
		if end.After(at) {
			at = end
		}
	}
}

// fixed replays sessions on their timestamps: a session starts at its first
// turn's timestamp, a later turn at its own timestamp (or at once, if the
// previous answer came after it), or its delay after the previous answer
// when it has no timestamp. concurrency > 0 caps the sessions in flight.
func (p *phase) fixed(ctx context.Context, sessions []*Session, concurrency int, autoOffset bool) {
	if len(sessions) == 0 {
		return
	}
	slots := newSlots(concurrency)
	start := p.r.clock.now()
	var offset time.Duration
	if autoOffset {
		offset = sessions[0].Turns[0].Timestamp
	}
	at := func(ts time.Duration) time.Time { return start.Add(ts - offset) }
	g := func(k int, t *Turn, prevEnd time.Time) bool {
		switch {
		case k == 0:
			return true
		case t.HasTimestamp:
			return p.sleepUntil(at(t.Timestamp))
		default:
			return p.sleepUntil(prevEnd.Add(t.Delay))
		}
	}
	for _, s := range sessions {
		if !p.sleepUntil(at(s.Turns[0].Timestamp)) || !p.acquire(slots) {
			break
		}
		p.start(ctx, s, slots, g)
	}
	p.wg.Wait()
}
