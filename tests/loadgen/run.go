package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duet-serve/duet/tokenizer"
)

// Options are Run's dependencies.
type Options struct {
	// Tokenizer renders and tokenizes prompts for the oracle and cuts the
	// corpus (required; use the server's encoding).
	Tokenizer *tokenizer.Tokenizer
	// Corpus supplies synthetic text (nil: NewCorpus(Tokenizer)).
	Corpus *Corpus
	// HTTPClient sends the requests (nil: a keep-alive transport sized for
	// the load).
	HTTPClient *http.Client
	// Progress receives a progress bar (nil: none); ProgressTTY redraws one
	// line with \r instead of printing a line every ProgressInterval
	// (default 5s, 200ms on a TTY).
	Progress         io.Writer
	ProgressTTY      bool
	ProgressInterval time.Duration
}

// Result is a finished run.
type Result struct {
	// Config is the configuration as run: defaults applied, seed set.
	Config Config
	// Records holds every request, warm-up included, in start order.
	Records []Record
	// Sessions are the distinct sessions the profiling phase started, in
	// start order (for inputs.json).
	Sessions []*Session
	// Cancelled reports a run stopped by its context before the end.
	Cancelled bool
}

// Run executes the benchmark described by cfg: the warm-up phase, then the
// profiling phase, each until its stop condition. It returns an error only
// when the benchmark cannot start (bad configuration or input file);
// request failures are records. Cancelling ctx stops the run early and
// returns what was measured, with Cancelled set.
func Run(ctx context.Context, cfg Config, opts Options) (*Result, error) {
	if opts.Tokenizer == nil {
		return nil, errors.New("loadgen: Options.Tokenizer is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.SeedSet {
		cfg.Seed, cfg.SeedSet = uint64(time.Now().UnixNano()), true
	}
	corpus := opts.Corpus
	if corpus == nil {
		var err error
		if corpus, err = NewCorpus(opts.Tokenizer); err != nil {
			return nil, err
		}
	}
	var fileSessions []*Session
	if cfg.InputFile != "" {
		var err error
		fileSessions, err = LoadInputFile(cfg.InputFile, cfg.DatasetType, corpus, cfg.HashBlockSize, cfg.Seed)
		if err != nil {
			return nil, err
		}
		cfg = promoteFixedSchedule(cfg, fileSessions)
	}
	cfg = cfg.withDefaults()
	if cfg.FixedSchedule {
		if err := checkTimestamps(fileSessions); err != nil {
			return nil, err
		}
	}
	r := &runner{cfg: cfg, tok: opts.Tokenizer, corpus: corpus, oracle: NewOracle(cfg.OracleBlockSize),
		client: NewClient(cfg, opts.HTTPClient, maxConns(cfg)), opts: opts}
	res := &Result{Config: cfg}
	if cfg.WarmupRequestCount > 0 {
		warm := newSynthetic(cfg, corpus, cfg.Seed, 2, 0)
		r.runPhase(ctx, PhaseWarmup, warm, cfg.WarmupRequestCount, 0, cfg.WarmupRequestCount, func(p *phase) {
			p.burst(max(1, cfg.Concurrency, cfg.NumUsers))
		})
	}
	src, total := r.profileSource(fileSessions)
	prof := r.runPhase(ctx, PhaseProfiling, src, cfg.RequestCount, cfg.Duration, total, func(p *phase) {
		switch {
		case cfg.FixedSchedule:
			p.fixed(orderByTimestamp(fileSessions, cfg.NumSessions), cfg.Concurrency, cfg.FixedScheduleAutoOffset)
		case cfg.UserCentricRate > 0:
			p.userCentric(cfg.NumUsers, cfg.UserCentricRate, cfg.Concurrency)
		case cfg.RequestRate > 0:
			p.rate(cfg.RequestRate, cfg.ArrivalPattern, cfg.Concurrency)
		default:
			p.burst(cfg.Concurrency)
		}
	})
	res.Sessions = prof.started
	res.Records = r.records
	sort.SliceStable(res.Records, func(i, j int) bool {
		a, b := &res.Records[i], &res.Records[j]
		if a.Phase != b.Phase {
			return a.Phase == PhaseWarmup
		}
		return a.Start.Before(b.Start)
	})
	res.Cancelled = ctx.Err() != nil
	return res, nil
}

// promoteFixedSchedule replays a mooncake trace with timestamps on its
// schedule when no load option was given, as aiperf does.
func promoteFixedSchedule(cfg Config, sessions []*Session) Config {
	if cfg.DatasetType == DatasetMooncake && !cfg.FixedSchedule && cfg.Concurrency == 0 &&
		cfg.RequestRate == 0 && cfg.UserCentricRate == 0 && len(sessions) > 0 && sessions[0].Turns[0].HasTimestamp {
		cfg.FixedSchedule = true
	}
	return cfg
}

func checkTimestamps(sessions []*Session) error {
	for _, s := range sessions {
		if !s.Turns[0].HasTimestamp {
			return fmt.Errorf("--fixed-schedule: session %q has no timestamp on its first turn", s.ID)
		}
	}
	return nil
}

// orderByTimestamp returns the first n sessions (all when n is 0) sorted by
// their first turn's timestamp.
func orderByTimestamp(sessions []*Session, n int) []*Session {
	out := append([]*Session(nil), sessions...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Turns[0].Timestamp < out[j].Turns[0].Timestamp })
	if n > 0 && n < len(out) {
		out = out[:n]
	}
	return out
}

// maxConns sizes the connection pool for the expected parallel streams.
func maxConns(cfg Config) int {
	return max(cfg.Concurrency, cfg.NumUsers, 64)
}

// profileSource returns the sessions of the profiling phase and the number
// of requests they make when known (0 when the run is bounded by time or
// request count only).
func (r *runner) profileSource(fileSessions []*Session) (source, int) {
	cfg := r.cfg
	total := cfg.RequestCount
	if fileSessions != nil {
		limit := cfg.NumSessions
		cycle := cfg.RequestCount > 0 || cfg.Duration > 0 || limit > len(fileSessions)
		if limit == 0 && !cycle {
			total = requests(fileSessions)
		}
		return &listSource{sessions: fileSessions, cycle: cycle, limit: limit}, total
	}
	if cfg.NumSessions > 0 {
		sessions := newSynthetic(cfg, r.corpus, cfg.Seed, 1, cfg.NumSessions).all()
		return &listSource{sessions: sessions}, requests(sessions)
	}
	return newSynthetic(cfg, r.corpus, cfg.Seed, 1, 0), total
}

// runner holds what the phases of one run share.
type runner struct {
	cfg    Config
	tok    *tokenizer.Tokenizer
	corpus *Corpus
	oracle *Oracle
	client *Client
	opts   Options

	mu      sync.Mutex // guards records
	records []Record
}

// phase is one phase of a run (warm-up or profiling) in progress.
type phase struct {
	r    *runner
	name string
	src  source
	ctx  context.Context // cancelled when the run is
	// inflight carries the requests; it is cancelled after the grace period
	// that follows the duration, or with ctx.
	inflight context.Context
	budget   *budget
	wg       sync.WaitGroup // session goroutines

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
// have all ended. count > 0 stops after that many requests; duration > 0
// stops sending after that long and cancels what is still in flight a
// grace period later. total is the expected number of requests for the
// progress bar (0: unknown).
func (r *runner) runPhase(ctx context.Context, name string, src source, count int, duration time.Duration, total int, drive func(*phase)) *phase {
	inflight, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := uint64(5)
	if name == PhaseWarmup {
		stream = 6
	}
	p := &phase{r: r, name: name, src: src, ctx: ctx, inflight: inflight, budget: newBudget(count),
		idRNG: rand.New(rand.NewPCG(r.cfg.Seed, stream)), seen: map[*Session]bool{}}
	if duration > 0 {
		stopTimer := time.AfterFunc(duration, p.budget.close)
		defer stopTimer.Stop()
		graceTimer := time.AfterFunc(duration+r.cfg.GracePeriod, cancel)
		defer graceTimer.Stop()
	}
	bar := r.startProgress(p, total, duration)
	drive(p)
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
	case <-p.ctx.Done():
		return true
	default:
		return false
	}
}

// sleepUntil waits until t; false if the phase stopped first.
func (p *phase) sleepUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return !p.stopped()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return !p.stopped()
	case <-p.budget.stop:
		return false
	case <-p.ctx.Done():
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
	case <-p.ctx.Done():
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
	return &session{sess: s, num: num, corrID: id, turns: len(s.Turns)}
}

// gate blocks until turn k may be sent; prevEnd is when the previous turn's
// answer ended. It returns false to end the session.
type gate func(k int, t *Turn, prevEnd time.Time) bool

// run sends a session's turns in order, each after gate allows it; a failed
// turn ends the session. It returns when the last answer ended.
func (p *phase) run(s *session, g gate) time.Time {
	conv := newConversation(s.sess)
	var prevEnd time.Time
	for k := 0; k < s.turns; k++ {
		t := &s.sess.Turns[k]
		if !g(k, t, prevEnd) || !p.budget.take() {
			break
		}
		rec, reply := p.send(s, conv, k)
		prevEnd = time.Now()
		if !rec.OK() {
			break
		}
		conv.answered(k, reply)
	}
	return prevEnd
}

// send sends turn k of a session and records it.
func (p *phase) send(s *session, conv *conversation, k int) (*Record, string) {
	r := p.r
	t := &s.sess.Turns[k]
	msgs := conv.messages(k)
	tokens := promptTokens(r.tok, r.cfg.EndpointType, msgs)
	payload := body(r.cfg, msgs, t.MaxTokens)
	reqID := randomUUID()
	oracle := r.oracle.Observe(tokens) // "earlier" = sent before this one
	p.active.Add(1)
	ex := r.client.do(p.inflight, payload, reqID, s.corrID)
	p.active.Add(-1)
	rec := Record{Phase: p.name, SessionNum: s.num, ConversationID: s.sess.ID, CorrelationID: s.corrID,
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
