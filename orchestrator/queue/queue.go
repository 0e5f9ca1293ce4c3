package queue

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Options are a Queue's dependencies. Every field is optional.
type Options struct {
	// Role is the role whose workers gate admission (default generation:
	// a request holds its gen worker for the whole answer).
	Role disagg.Role
	// Workers returns the available workers whose capacity key may use.
	// nil: pool.Available(Role) for every key (one pool shared by every
	// model). It runs under the Queue's lock: it must be fast and must not
	// call the Queue. It should return endpoints of the pool serving Role:
	// only those are scraped.
	Workers func(key string) []*router.Endpoint
	// Log gets scrape failures at debug level (nil: no logs).
	Log *zap.Logger
	// Registry gets the duet_queue_* metrics (nil: not registered).
	Registry prometheus.Registerer
	// HTTPClient scrapes workers' /metrics (nil: a client of its own; each
	// scrape is bounded by scrape_interval).
	HTTPClient *http.Client
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// AfterFunc runs f in its own goroutine after d unless stop is called
	// first, and stop reports whether it prevented the call, like
	// time.AfterFunc (nil: time.AfterFunc). Tests inject a fake clock.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
}

// Queue is the admission queue. Build it with New; it is safe for
// concurrent use.
type Queue struct {
	cfg       Config
	pool      *router.Pool
	role      disagg.Role
	workers   func(key string) []*router.Endpoint
	client    *http.Client
	log       *zap.Logger
	now       func() time.Time
	afterFunc func(time.Duration, func()) func() bool
	metrics   *metrics
	// priorities maps each class name, and "" for default_class, to its
	// index in cfg.Classes (0 highest). Read-only after New.
	priorities map[string]int

	// mu guards the fields below and every keyState, waiter and Slot.
	mu      sync.Mutex
	keys    map[string]*keyState
	boost   *boostTable
	usage   *usageTable // nil unless fairness: user
	samples map[*router.Endpoint]sample
	// scrapeFailed names the workers with a scrape-error series, pruned
	// when they leave the pool.
	scrapeFailed map[string]bool
	seq          uint64
}

// New validates cfg and builds a Queue over pool. With cfg.Enabled false the
// Queue admits everything at once and pool may be nil.
func New(cfg Config, pool *router.Pool, opts Options) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	if cfg.Enabled && pool == nil {
		return nil, fmt.Errorf("queue: no worker pool")
	}
	q := &Queue{cfg: cfg, pool: pool, role: opts.Role, workers: opts.Workers, client: opts.HTTPClient,
		log: opts.Log, now: opts.Now, keys: map[string]*keyState{},
		boost: newBoostTable(cfg.SessionBoostTTL, cfg.BoostSessions), samples: map[*router.Endpoint]sample{},
		scrapeFailed: map[string]bool{}}
	q.priorities = map[string]int{}
	for i, cl := range cfg.Classes {
		q.priorities[cl.Name] = i
	}
	q.priorities[""] = q.priorities[cfg.DefaultClass]
	if q.role == "" {
		q.role = disagg.RoleGeneration
	}
	if _, err := disagg.ParseRole(string(q.role)); err != nil {
		return nil, fmt.Errorf("queue: options: %w", err)
	}
	if q.workers == nil {
		q.workers = func(string) []*router.Endpoint { return pool.Available(q.role) }
	}
	if q.client == nil {
		q.client = &http.Client{}
	}
	if q.log == nil {
		q.log = zap.NewNop()
	}
	if q.now == nil {
		q.now = time.Now
	}
	q.afterFunc = opts.AfterFunc
	if q.afterFunc == nil {
		q.afterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	if cfg.Fairness != FairnessNone {
		q.usage = newUsageTable(cfg.FairnessHalfLife)
	}
	m, err := newMetrics(opts.Registry)
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	q.metrics = m
	return q, nil
}

// Config returns the configuration in use.
func (q *Queue) Config() Config { return q.cfg }

// Run scrapes workers (with respect_worker_queue) and runs a backstop
// admission pass every scrape_interval until ctx is done, then returns. It
// returns at once when the queue is disabled. Admission does not depend on
// Run except for capacity that grows outside the queue's view; call it once,
// from the goroutine that owns the Queue's lifetime.
func (q *Queue) Run(ctx context.Context) {
	if !q.cfg.Enabled {
		return
	}
	tick := time.NewTicker(q.cfg.ScrapeInterval)
	defer tick.Stop()
	for {
		q.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// round is one iteration of Run: a scrape when configured, then an
// admission pass over every key.
func (q *Queue) round(ctx context.Context) {
	if q.cfg.RespectWorkerQueue {
		q.scrape(ctx)
	}
	q.Recheck()
}

// Recheck runs an admission pass over every key. Call it when capacity may
// have grown outside the queue's view (a worker added, recovered or
// undrained) to admit without waiting for Run's next round.
func (q *Queue) Recheck() {
	if !q.cfg.Enabled {
		return
	}
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, k := range q.keys {
		q.admitLocked(k, now)
	}
}

// Stats is a snapshot of one key's queue.
type Stats struct {
	// Boosted and Normal are the requests waiting in each turn class, over
	// every priority class.
	Boosted, Normal int
	// Admitted is the slots granted and not released.
	Admitted int
	// Held is the slots held for a session's next turn (grace_period).
	Held int
	// Capacity is the key's total capacity now (admitted and held slots
	// included).
	Capacity int
}

// Stats returns a snapshot of key's queue (zero when disabled).
func (q *Queue) Stats(key string) Stats {
	if !q.cfg.Enabled {
		return Stats{}
	}
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	st := Stats{Capacity: q.capacityLocked(key, now)}
	if k := q.keys[key]; k != nil {
		st.Admitted, st.Held = k.admitted, len(k.holds)
		for _, b := range k.bands {
			st.Boosted += b.boosted.Len()
			st.Normal += b.nNormal
		}
	}
	return st
}
