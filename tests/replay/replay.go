// Package replay runs a workload through duet's router (the same policies,
// session table, prefix index, leases and spill rules `duet serve` uses,
// built from the same router config) against a modelled fleet in
// simulated time: each worker is the simulator's KV cache and timing model
// (workers/sim/model), so an hour of traffic takes seconds. It produces the
// same records as `duet bench` (tests/loadgen), so the same summaries,
// export files and comparisons apply; TTFT and latency are modelled.
//
// What is modelled: routing (load charged by leases and refunded when a
// phase ends), ctx admission (running slots, KV blocks), prefix reuse and
// LRU eviction in every worker's cache, the ctx prefill server (FIFO) and
// overhead, the KV pin held until the gen worker pulls it, gen admission,
// KV transfer of the blocks the gen worker lacks, and decode at the ITL of
// the gen worker's running sequences when the sequence starts. Not
// modelled: duet's and HTTP's own latency, conditional disaggregation
// (local prefill on the gen worker), retries and failures.
package replay

import (
	"container/heap"
	"fmt"
	"slices"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/tests/loadgen"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/duet-serve/duet/workers/sim/model"
)

// Fleet is the modelled fleet.
type Fleet struct {
	NCtx, NGen int
	Ctx, Gen   WorkerModel
}

// Config is one replay.
type Config struct {
	// Router is the router: section, as `duet serve` reads it.
	Router router.Config
	Fleet  Fleet
	// Concurrency is how many sessions run at once when the workload is not
	// replayed on its timestamps (as duet bench --concurrency).
	Concurrency int
	// FixedSchedule starts each session at its first turn's timestamp,
	// divided by Speedup (> 0).
	FixedSchedule bool
	Speedup       float64
	// NoSessionIDs sends no session key (implicit matching only), as duet
	// bench --no-affinity-header.
	NoSessionIDs bool
	// DefaultMaxTokens is the output of a turn without a limit.
	DefaultMaxTokens int
	// OracleBlockSize is the oracle's block size in tokens.
	OracleBlockSize int
	// OracleWindow is the windowed oracle's memory (0: 10 minutes).
	OracleWindow time.Duration
	// KVEvents feeds the router's cache index with the modelled workers' KV
	// cache events, as workers that publish them do (router/kvfeed); false:
	// the router estimates the caches from what it sent.
	KVEvents bool
	// ServingOverhead is the time the serving path adds to a request
	// outside the workers (HTTP hops, tokenization, relay), which the
	// worker model does not have: half of it delays the context phase,
	// half the generation phase. Default 0.
	ServingOverhead time.Duration
}

// Session is one conversation to replay.
type Session interface {
	// ID names the session (its session key unless NoSessionIDs).
	ID() string
	// Turns is the number of turns.
	Turns() int
	// Turn returns turn k's output length and its delay after the previous
	// turn (for turn 0, its timestamp when it has one).
	Turn(k int) (output int, delay time.Duration)
	// Prompt returns turn k's prompt tokens, given the replies of the turns
	// before it.
	Prompt(k int) []int
	// Answered records turn k's reply of output tokens and returns the
	// reply's tokens as the next prompt will hold them (nil when later
	// turns do not resend it).
	Answered(k int, output int) []int
}

// epoch is the simulated clock's start; records are stamped from it.
var epoch = time.Unix(1_700_000_000, 0)

// Result is what a replay measured.
type Result struct {
	// Records are one per request, as duet bench writes them (modelled
	// times from epoch).
	Records []loadgen.Record
	// Stats are the router's counters at the end (spills, affinity breaks).
	Stats *router.Stats
	// Routes counts the routing decisions by kind (router.DecisionKind),
	// sorted by kind.
	Routes []router.Count
	// Prefilled is each ctx worker's computed prefill tokens, by ID.
	Prefilled map[string]int64
	// Imbalance is max/mean of the ctx workers' prefill tokens over the
	// whole run; MinuteImbalance the same per minute of simulated time,
	// averaged over the minutes weighted by their tokens.
	Imbalance, MinuteImbalance float64
	// Duration is the simulated time the replay covered.
	Duration time.Duration
	// WindowOracleRatio is the oracle's hit ratio when a block counts only
	// if some prompt held it within the last OracleWindow (an unlimited
	// cache that forgets what went unused that long).
	WindowOracleRatio float64
	// PooledOracleRatio is the hit ratio of an ideal router whose ctx
	// workers' caches were one LRU cache of their summed size (the
	// oracle's hit ratio is that of an unlimited cache): what any router
	// could reuse with this fleet's memory.
	PooledOracleRatio float64
	// IndexExact is the share of context phases whose cached tokens the
	// router expected exactly (Pair.CtxCached against what the modelled
	// worker found); IndexErrorP99 is the 99th percentile of the absolute
	// difference, in tokens: the cache index's error.
	IndexExact    float64
	IndexErrorP99 int
}

// run is one replay in progress; it is single-threaded.
type run struct {
	cfg    Config
	now    time.Time
	events eventQueue
	seq    uint64
	rt     *router.Router
	ctx    map[*router.Endpoint]*worker
	gen    map[*router.Endpoint]*worker
	oracle *loadgen.Oracle
	pooled *pooledOracle
	window *windowOracle
	recs   []loadgen.Record
	queue  []Session // sessions not started (concurrency mode)
	// started counts the sessions started, to number them.
	started int
	// routes counts routing decisions by kind.
	routes map[string]uint64
	// indexErrors are |expected − found| cached tokens of each context
	// phase.
	indexErrors []int
}

// Run replays sessions. It is deterministic for the same inputs.
func Run(cfg Config, sessions []Session) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, now: epoch, ctx: map[*router.Endpoint]*worker{}, gen: map[*router.Endpoint]*worker{},
		oracle: loadgen.NewOracle(cfg.OracleBlockSize), routes: map[string]uint64{},
		pooled: newPooledOracle(cfg.Fleet.NCtx*cfg.Fleet.Ctx.KVCapacityBlocks, cfg.Fleet.Ctx.BlockSize),
		window: newWindowOracle(cfg.OracleWindow)}
	pool := router.NewPool()
	// Each worker reports its KV cache size, as vLLM and SGLang workers
	// (and sims speaking their protocols) do to the fleet.
	var members []router.Member
	for i := 0; i < cfg.Fleet.NCtx; i++ {
		members = append(members, router.Member{ID: fmt.Sprintf("ctx-%d", i), URL: fmt.Sprintf("http://ctx-%d", i), Role: disagg.RoleContext, Healthy: true,
			KVCacheTokens: cfg.Fleet.Ctx.cacheTokens()})
	}
	for i := 0; i < cfg.Fleet.NGen; i++ {
		members = append(members, router.Member{ID: fmt.Sprintf("gen-%d", i), URL: fmt.Sprintf("http://gen-%d", i), Role: disagg.RoleGeneration, Healthy: true,
			KVCacheTokens: cfg.Fleet.Gen.cacheTokens()})
	}
	pool.Sync(members)
	rt, err := router.New(pool, cfg.Router, func() time.Time { return r.now })
	if err != nil {
		return nil, fmt.Errorf("router.%w", err)
	}
	r.rt = rt
	for _, ep := range pool.All() {
		w := newWorker(ep, cfg.Fleet.Gen)
		if ep.Role == disagg.RoleContext {
			w = newWorker(ep, cfg.Fleet.Ctx)
			r.ctx[ep] = w
		} else {
			r.gen[ep] = w
		}
		if cfg.KVEvents {
			rt.Cache(ep).AttachEvents()
			w.kv.SetObserver(eventFeed{rt: rt, ep: ep})
		}
	}
	r.start(sessions)
	for r.events.Len() > 0 {
		ev := heap.Pop(&r.events).(*event)
		r.now = ev.at
		ev.do()
	}
	return r.result(), nil
}

func (c Config) validate() error {
	switch {
	case c.Fleet.NCtx < 1 || c.Fleet.NGen < 1:
		return fmt.Errorf("replay: the fleet needs at least one ctx and one gen worker, got %d and %d", c.Fleet.NCtx, c.Fleet.NGen)
	case c.Fleet.Ctx.BlockSize < 1 || c.Fleet.Gen.BlockSize < 1 || c.Fleet.Ctx.KVCapacityBlocks < 1 || c.Fleet.Gen.KVCapacityBlocks < 1:
		return fmt.Errorf("replay: block size and KV capacity must be >= 1")
	case c.Fleet.Ctx.MaxNumSeqs < 1 || c.Fleet.Gen.MaxNumSeqs < 1:
		return fmt.Errorf("replay: max_num_seqs must be >= 1")
	case !c.FixedSchedule && c.Concurrency < 1:
		return fmt.Errorf("replay: --concurrency must be >= 1 without --fixed-schedule")
	case c.FixedSchedule && c.Speedup <= 0:
		return fmt.Errorf("replay: --speedup must be > 0")
	case c.OracleBlockSize < 1:
		return fmt.Errorf("replay: the oracle block size must be >= 1")
	case c.ServingOverhead < 0:
		return fmt.Errorf("replay: --serving-overhead must be >= 0")
	}
	return nil
}

// start schedules the first turns: every session at its timestamp, or the
// first Concurrency sessions now and each next one when one ends.
func (r *run) start(sessions []Session) {
	if r.cfg.FixedSchedule {
		r.started = len(sessions)
		for i, s := range sessions {
			_, at := s.Turn(0)
			r.at(epoch.Add(time.Duration(float64(at)/r.cfg.Speedup)), r.arrival(i, s, 0))
		}
		return
	}
	n := min(r.cfg.Concurrency, len(sessions))
	r.queue = sessions[n:]
	for _, s := range sessions[:n] {
		r.startSession(s)
	}
}

// startSession schedules a session's first turn now.
func (r *run) startSession(s Session) {
	r.at(r.now, r.arrival(r.started, s, 0))
	r.started++
}

// sessionDone starts the next waiting session (concurrency mode).
func (r *run) sessionDone() {
	if r.cfg.FixedSchedule || len(r.queue) == 0 {
		return
	}
	s := r.queue[0]
	r.queue = r.queue[1:]
	r.startSession(s)
}

// at schedules fn at t.
func (r *run) at(t time.Time, fn func()) {
	r.seq++
	heap.Push(&r.events, &event{at: t, seq: r.seq, do: fn})
}

// hashesFor returns the prompt's block hashes of blockSize tokens: hashes
// when they were computed with that size (with the router's), else anew.
func (r *run) hashesFor(prompt []int, hashes []uint64, blockSize int) []uint64 {
	if blockSize == r.rt.BlockSize() {
		return hashes
	}
	return tokenizer.BlockHashes(prompt, blockSize)
}

// observeOracle feeds the oracle the prompt (with the router's hashes when
// the block sizes agree).
func (r *run) observeOracle(prompt []int, hashes []uint64) int {
	if r.cfg.OracleBlockSize == r.rt.BlockSize() {
		return r.oracle.ObserveHashes(hashes)
	}
	return r.oracle.Observe(prompt)
}

// after runs fn d from now (at once, in order, when d is 0).
func (r *run) after(d time.Duration, fn func()) {
	if d <= 0 {
		fn()
		return
	}
	r.at(r.now.Add(d), fn)
}

// arrival is turn k of session s arriving now.
func (r *run) arrival(num int, s Session, k int) func() {
	return func() {
		output, _ := s.Turn(k)
		prompt := s.Prompt(k)
		if output <= 0 {
			output = r.cfg.DefaultMaxTokens
		}
		q := &request{r: r, num: num, sess: s, k: k, prompt: prompt, output: output, arrived: r.now}
		q.route()
	}
}

// request is one turn in flight.
type request struct {
	r       *run
	num     int
	sess    Session
	k       int
	prompt  []int
	output  int
	arrived time.Time

	pair             *router.Pair
	ctxW, genW       *worker
	simHashes        []uint64
	ctxAlloc         *model.KVAlloc
	ctxCached        int
	firstAt, endedAt time.Time
}

func (q *request) route() {
	r := q.r
	// RequestID is the one its record gets (it is appended next): consistent
	// hashing keys a request without a session by it, as duet keys it by
	// the x-request-id duet bench sends.
	rq := &router.Request{Tokens: q.prompt, Hashes: tokenizer.BlockHashes(q.prompt, r.rt.BlockSize()), MaxTokens: q.output,
		RequestID: fmt.Sprintf("replay-%d", len(r.recs))}
	if !r.cfg.NoSessionIDs {
		rq.SessionKey = q.sess.ID()
	}
	oracle := r.observeOracle(q.prompt, rq.Hashes)
	r.pooled.observe(q.prompt, r.hashesFor(q.prompt, rq.Hashes, r.pooled.bs))
	r.window.observe(len(q.prompt), r.hashesFor(q.prompt, rq.Hashes, r.cfg.OracleBlockSize), r.cfg.OracleBlockSize, r.now)
	pair, err := r.rt.Route(rq)
	if err != nil {
		q.fail(err, oracle)
		return
	}
	r.routes[pair.Decision.String()]++
	q.pair, q.ctxW, q.genW = pair, r.ctx[pair.Ctx.Endpoint()], r.gen[pair.Gen.Endpoint()]
	q.simHashes = r.hashesFor(q.prompt, rq.Hashes, q.ctxW.m.BlockSize)
	ctxBlocks, genBlocks := q.ctxW.kv.BlocksFor(len(q.prompt)+1), q.genW.kv.BlocksFor(len(q.prompt)+q.output)
	if !q.ctxW.fits(ctxBlocks) || !q.genW.fits(genBlocks) {
		pair.End(router.Outcome{})
		q.fail(fmt.Errorf("context_length_exceeded: %d prompt tokens plus %d output need more KV cache than a worker has", len(q.prompt), q.output), oracle)
		return
	}
	rec := q.record(oracle)
	r.after(r.cfg.ServingOverhead/2, func() {
		q.ctxW.admit(&admission{hashes: q.simHashes, maxMatch: (len(q.prompt) - 1) / q.ctxW.m.BlockSize, blocks: ctxBlocks,
			start: func(a *model.KVAlloc, at time.Time) { q.prefill(a, at, rec) }}, r.now)
	})
}

// prefill books the context phase on the ctx worker admitted at at.
func (q *request) prefill(a *model.KVAlloc, at time.Time, rec int) {
	w, t := q.ctxW, q.ctxW.m.Timing
	q.ctxAlloc = a
	q.ctxCached = min(a.Matched()*w.m.BlockSize, len(q.prompt))
	uncached := len(q.prompt) - q.ctxCached
	_, computed := w.prefill.Reserve(at, t.PrefillCompute(uncached, 1))
	w.countPrefill(uncached, at)
	q.r.recs[rec].CachedTokens = q.ctxCached
	q.r.indexErrors = append(q.r.indexErrors, abs(q.pair.CtxCached-q.ctxCached))
	q.r.at(computed.Add(t.Overhead(1)), func() { q.contextDone(rec) })
}

// contextDone: the ctx worker answered with the first token; its KV stays
// pinned until the gen worker pulls it.
func (q *request) contextDone(rec int) {
	r := q.r
	q.ctxW.kv.CommitTokens(q.ctxAlloc, q.simHashes, q.prompt)
	q.ctxW.endRunning(r.now)
	q.pair.ContextDone(true, q.ctxCached)
	genHashes := q.simHashes
	if bs := q.genW.m.BlockSize; bs != q.ctxW.m.BlockSize {
		genHashes = tokenizer.BlockHashes(q.prompt, bs)
	}
	r.after(r.cfg.ServingOverhead-r.cfg.ServingOverhead/2, func() {
		q.genW.admit(&admission{hashes: genHashes, maxMatch: len(genHashes), blocks: q.genW.kv.BlocksFor(len(q.prompt) + q.output),
			start: func(a *model.KVAlloc, at time.Time) { q.decode(a, at, rec) }}, r.now)
	})
}

// decode pulls the missing KV (releasing the ctx pin) and streams the
// output at the gen worker's ITL.
func (q *request) decode(a *model.KVAlloc, at time.Time, rec int) {
	r, w, t := q.r, q.genW, q.genW.m.Timing
	q.ctxW.release(q.ctxAlloc, q.simHashes, q.prompt, at)
	held := min(a.Matched()*w.m.BlockSize, len(q.prompt))
	q.firstAt = at.Add(t.Transfer(len(q.prompt)-held, 1))
	q.endedAt = q.firstAt.Add(time.Duration(q.output-1) * t.ITL(w.running, 1))
	r.recs[rec].FirstContent = q.firstAt.Sub(q.arrived)
	r.at(q.endedAt, func() { q.finish(a, rec) })
}

// finish ends the request: the gen worker keeps prompt and reply cached,
// the router learns the turn, and the session's next turn is scheduled.
func (q *request) finish(a *model.KVAlloc, rec int) {
	r, w := q.r, q.genW
	reply := q.sess.Answered(q.k, q.output)
	full := append(q.prompt[:len(q.prompt):len(q.prompt)], reply...)
	held := r.hashesFor(q.prompt, q.simHashes, w.m.BlockSize)
	w.release(a, tokenizer.ExtendBlockHashes(held[:len(held):len(held)], full, w.m.BlockSize), full, r.now)
	w.endRunning(r.now)
	q.pair.End(router.Outcome{GenRan: true})
	q.complete(rec)
	q.next()
}

// complete stamps the record's modelled times.
func (q *request) complete(rec int) {
	x := &q.r.recs[rec]
	x.Ack, x.End = q.firstAt, q.endedAt
	x.LastContent = q.endedAt.Sub(q.arrived)
	if q.output > 1 {
		x.SecondContent = x.FirstContent + (x.LastContent-x.FirstContent)/time.Duration(q.output-1)
	}
	x.ContentChunks = q.output
	x.HasUsage, x.PromptTokens, x.CompletionTokens = true, len(q.prompt), q.output
}

// next schedules the session's next turn after its delay, or ends it.
func (q *request) next() {
	if q.k+1 >= q.sess.Turns() {
		q.r.sessionDone()
		return
	}
	_, delay := q.sess.Turn(q.k + 1)
	q.r.at(q.r.now.Add(delay), q.r.arrival(q.num, q.sess, q.k+1))
}

// record appends the request's record and returns its index.
func (q *request) record(oracle int) int {
	r := q.r
	r.recs = append(r.recs, loadgen.Record{Phase: loadgen.PhaseProfiling, SessionNum: q.num, ConversationID: q.sess.ID(),
		CorrelationID: q.sess.ID(), RequestID: fmt.Sprintf("replay-%d", len(r.recs)), URL: "replay", TurnIndex: q.k,
		Streaming: true, Start: q.arrived, ClientPromptTokens: len(q.prompt), ClientOutputTokens: q.output,
		OracleTokens: oracle, RequestedOutputTokens: q.output})
	return len(r.recs) - 1
}

// fail records a request that could not run and moves the session on.
func (q *request) fail(err error, oracle int) {
	rec := q.record(oracle)
	q.r.recs[rec].Err = &loadgen.ErrorDetails{Type: "replay", Message: err.Error()}
	q.r.recs[rec].End = q.r.now
	q.sess.Answered(q.k, 0)
	q.next()
}

// result summarises the run.
func (r *run) result() *Result {
	res := &Result{Records: r.recs, Stats: r.rt.Stats(), Prefilled: map[string]int64{}, Duration: r.now.Sub(epoch),
		PooledOracleRatio: r.pooled.ratio(), WindowOracleRatio: r.window.ratio(), Routes: router.Counts(r.routes)}
	res.IndexExact, res.IndexErrorP99 = indexError(r.indexErrors)
	var all []int64
	minutes := map[int64][]int64{}
	for ep, w := range r.ctx {
		res.Prefilled[ep.ID] = w.prefilled
		all = append(all, w.prefilled)
		for m, n := range w.perMinute {
			minutes[m] = append(minutes[m], n)
		}
	}
	res.Imbalance = maxOverMean(all)
	var weighted, total float64
	for _, ns := range minutes {
		for len(ns) < len(r.ctx) {
			ns = append(ns, 0) // a worker idle that minute
		}
		var sum int64
		for _, n := range ns {
			sum += n
		}
		weighted += maxOverMean(ns) * float64(sum)
		total += float64(sum)
	}
	if total > 0 {
		res.MinuteImbalance = weighted / total
	}
	return res
}

// pooledOracle is one LRU KV cache of the whole ctx fleet's size that sees
// every prompt: the hit ratio an ideal router could reach with that memory.
type pooledOracle struct {
	kv           *model.KVCache
	bs           int
	hits, tokens int64
}

func newPooledOracle(blocks, blockSize int) *pooledOracle {
	return &pooledOracle{kv: model.NewKVCache(blocks, blockSize), bs: blockSize}
}

// observe looks the prompt up by its block hashes (of o.bs tokens: its
// full blocks, as an engine reuses them)
// and then caches it; a prompt larger than the cache is only looked up.
func (o *pooledOracle) observe(prompt []int, hashes []uint64) {
	matched := o.kv.Lookup(hashes)
	o.hits += int64(min(matched*o.bs, len(prompt)))
	o.tokens += int64(len(prompt))
	if a, ok := o.kv.Allocate(hashes, matched, len(hashes)); ok {
		o.kv.Commit(a, hashes)
		o.kv.Release(a)
	}
}

func (o *pooledOracle) ratio() float64 {
	if o.tokens == 0 {
		return 0
	}
	return float64(o.hits) / float64(o.tokens)
}

// windowOracle is the unlimited oracle with a memory of window: a block
// counts when a prompt held it at most window ago.
type windowOracle struct {
	window       time.Duration
	seen         map[uint64]time.Time
	hits, tokens int64
}

// defaultOracleWindow is the windowed oracle's memory by default: past the
// gap between most turns of real chats (Mooncake's conversation trace: p50
// 2 min, p90 8 min).
const defaultOracleWindow = 10 * time.Minute

func newWindowOracle(window time.Duration) *windowOracle {
	if window <= 0 {
		window = defaultOracleWindow
	}
	return &windowOracle{window: window, seen: map[uint64]time.Time{}}
}

// observe counts the leading blocks seen within the window (hashes are of
// blockSize tokens), then marks every block seen now.
func (o *windowOracle) observe(promptLen int, hashes []uint64, blockSize int, now time.Time) {
	hit := 0
	for hit < len(hashes) {
		at, ok := o.seen[hashes[hit]]
		if !ok || now.Sub(at) > o.window {
			break
		}
		hit++
	}
	for _, h := range hashes {
		o.seen[h] = now
	}
	o.hits += int64(hit * blockSize)
	o.tokens += int64(promptLen)
}

func (o *windowOracle) ratio() float64 {
	if o.tokens == 0 {
		return 0
	}
	return float64(o.hits) / float64(o.tokens)
}

// maxOverMean is max/mean of xs (0 when they sum to 0).
func maxOverMean(xs []int64) float64 {
	var sum, mx int64
	for _, x := range xs {
		sum += x
		mx = max(mx, x)
	}
	if sum == 0 {
		return 0
	}
	return float64(mx) / (float64(sum) / float64(len(xs)))
}

// event is something that happens at a simulated time; seq keeps events
// of the same time in the order they were scheduled.
type event struct {
	at  time.Time
	seq uint64
	do  func()
}

type eventQueue []*event

func (h eventQueue) Len() int { return len(h) }
func (h eventQueue) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventQueue) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventQueue) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventQueue) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil // the popped event's closure (and its request's prompt) must not outlive it
	*h = old[:len(old)-1]
	return x
}

// indexError is the share of zero errors and the 99th percentile of errs
// (nearest rank); 1 and 0 when there are none.
func indexError(errs []int) (exact float64, p99 int) {
	if len(errs) == 0 {
		return 1, 0
	}
	sorted := slices.Clone(errs)
	slices.Sort(sorted)
	zero := 0
	for _, e := range sorted {
		if e == 0 {
			zero++
		}
	}
	return float64(zero) / float64(len(sorted)), sorted[(len(sorted)*99+99)/100-1]
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
