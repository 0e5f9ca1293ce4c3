package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// phase is one phase of a run (warm-up or profiling) in progress.
type phase struct {
	r      *runner
	name   string
	src    source
	budget *budget
	// cancelled is closed when the run's context is cancelled.
	cancelled <-chan struct{}
	wg        sync.WaitGroup // session goroutines

	sessions atomic.Int64 // sessions started
	done     atomic.Int64 // requests finished
	failed   atomic.Int64 // requests failed
	active   atomic.Int64 // requests in flight

	mu      sync.Mutex // guards idRNG, started, seen
	idRNG   *rand.Rand
	started []*Session
	seen    map[*Session]bool
}

// runPhase runs one phase: drive starts the sessions and returns once they
// have all ended; the context it gets carries the requests. count > 0 stops
// after that many requests; duration > 0 stops sending after that long and
// cancels what is still in flight a grace period later. total is the
// expected number of requests for the progress bar (0: unknown).
func (r *runner) runPhase(ctx context.Context, name string, src source, count int, duration time.Duration, total int,
	drive func(context.Context, *phase)) *phase {
	inflight, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := uint64(5)
	if name == PhaseWarmup {
		stream = 6
	}
	p := &phase{r: r, name: name, src: src, cancelled: ctx.Done(), budget: newBudget(count),
		idRNG: rand.New(rand.NewPCG(r.cfg.Seed, stream)), seen: map[*Session]bool{}}
	if duration > 0 {
		stopSending := r.clock.afterFunc(duration, p.budget.close)
		defer stopSending()
		stopGrace := r.clock.afterFunc(duration+r.cfg.GracePeriod, cancel)
		defer stopGrace()
	}
	bar := r.startProgress(p, total, duration)
	drive(inflight, p)
	p.wg.Wait()
	bar.stop()
	return p
}

// budget is a phase's stop condition: a request count and a stop signal
// (count reached, duration over).
type budget struct {
	limit int64 // 0: no limit
	sent  atomic.Int64
	stop  chan struct{}
	once  sync.Once
}

func newBudget(limit int) *budget {
	return &budget{limit: int64(limit), stop: make(chan struct{})}
}

// take reserves one request; false means the phase is over.
func (b *budget) take() bool {
	select {
	case <-b.stop:
		return false
	default:
	}
	if b.limit == 0 {
		return true
	}
	n := b.sent.Add(1)
	if n >= b.limit {
		b.close()
	}
	return n <= b.limit
}

func (b *budget) close() { b.once.Do(func() { close(b.stop) }) }

// stopped reports whether no more requests may be sent.
func (p *phase) stopped() bool {
	select {
	case <-p.budget.stop:
		return true
	case <-p.cancelled:
		return true
	default:
		return false
	}
}

// sleepUntil waits until t on the run's clock; false if the phase stopped
// first.
func (p *phase) sleepUntil(t time.Time) bool {
	d := p.r.clock.until(t)
	if d <= 0 {
		return !p.stopped()
	}
	fired, stop := p.r.clock.after(d)
	defer stop()
	select {
	case <-fired:
		return !p.stopped()
	case <-p.budget.stop:
		return false
	case <-p.cancelled:
		return false
	}
}

// acquire takes a session slot; slots is nil when sessions are unlimited.
func (p *phase) acquire(slots chan struct{}) bool {
	if slots == nil {
		return !p.stopped()
	}
	select {
	case slots <- struct{}{}:
		if p.stopped() {
			<-slots
			return false
		}
		return true
	case <-p.budget.stop:
		return false
	case <-p.cancelled:
		return false
	}
}

func release(slots chan struct{}) {
	if slots != nil {
		<-slots
	}
}

func newSlots(n int) chan struct{} {
	if n <= 0 {
		return nil
	}
	return make(chan struct{}, n)
}

// session is one session being run: its workload and its ids.
type session struct {
	sess   *Session
	num    int
	corrID string
	// turns is how many of the session's turns to send.
	turns int
	// url is the index of the URL the session's turns go to
	// (URLRoundRobin); with URLTurnRoundRobin each turn takes the next.
	url int
}

// begin numbers a session and gives it its correlation id: a seeded uuid,
// or the user number in user-centric mode.
func (p *phase) begin(s *Session) *session {
	num := int(p.sessions.Add(1) - 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	id := uuidFrom(p.idRNG)
	if p.r.cfg.UserCentricRate > 0 && p.name == PhaseProfiling {
		id = fmt.Sprint(num + 1)
	}
	if !p.seen[s] {
		p.seen[s] = true
		p.started = append(p.started, s)
	}
	return &session{sess: s, num: num, corrID: id, turns: len(s.Turns), url: p.r.client.nextURL()}
}

// gate blocks until turn k may be sent; prevEnd is when the previous turn's
// answer ended. It returns false to end the session.
type gate func(k int, t *Turn, prevEnd time.Time) bool

// run sends a session's turns in order, each after gate allows it; a failed
// turn ends the session. It returns when the last answer ended.
func (p *phase) run(ctx context.Context, s *session, g gate) time.Time {
	conv := newConversation(s.sess)
	var prevEnd time.Time
	for k := 0; k < s.turns; k++ {
		t := &s.sess.Turns[k]
		if !g(k, t, prevEnd) || !p.budget.take() {
			break
		}
		rec, reply := p.send(ctx, s, conv, k)
		prevEnd = p.r.clock.now()
		if !rec.OK() {
			break
		}
		conv.answered(k, reply)
	}
	return prevEnd
}

// send sends turn k of a session and records it.
func (p *phase) send(ctx context.Context, s *session, conv *conversation, k int) (*Record, string) {
	r := p.r
	t := &s.sess.Turns[k]
	msgs := conv.messages(k)
	tokens := promptTokens(r.tok, r.cfg.EndpointType, msgs)
	payload := body(r.cfg, msgs, t.MaxTokens)
	reqID := randomUUID()
	oracle := r.oracle.Observe(tokens) // "earlier" = sent before this one
	url := s.url
	if r.cfg.URLStrategy == URLTurnRoundRobin && k > 0 { // turn 0 has the URL begin took
		url = r.client.nextURL()
	}
	p.active.Add(1)
	ex := r.client.do(ctx, url, payload, reqID, s.corrID)
	p.active.Add(-1)
	rec := Record{Phase: p.name, SessionNum: s.num, ConversationID: s.sess.ID, CorrelationID: s.corrID, URL: r.cfg.URLs[url],
		RequestID: reqID, TurnIndex: k, Streaming: r.cfg.Streaming, Start: ex.start, Ack: ex.ack, End: ex.end,
		ContentChunks: ex.chunks, ClientPromptTokens: len(tokens), OracleTokens: oracle,
		RequestedOutputTokens: t.MaxTokens, Err: ex.err, Cancelled: ex.cancelled}
	if ex.chunks > 0 {
		rec.FirstContent, rec.LastContent = ex.first.Sub(ex.start), ex.last.Sub(ex.start)
		if ex.chunks > 1 {
			rec.SecondContent = ex.second.Sub(ex.start)
		}
	}
	reply := ex.text.String()
	if u := ex.usage; u != nil {
		rec.HasUsage = true
		rec.PromptTokens, rec.CompletionTokens, rec.CachedTokens = u.PromptTokens, u.CompletionTokens, u.CachedTokens()
	}
	if rec.OK() && (!rec.HasUsage || rec.CompletionTokens == 0) {
		rec.ClientOutputTokens = r.tok.Count(reply)
	}
	p.done.Add(1)
	if !rec.OK() {
		p.failed.Add(1)
	}
	r.mu.Lock()
	r.records = append(r.records, rec)
	r.mu.Unlock()
	return &rec, reply
}

// randomUUID returns a version 4 UUID from the process's random source.
func randomUUID() string {
	return uuidFrom(rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
}
