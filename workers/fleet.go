package workers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Fleet launches the workers of a Plan, supervises them and reports their
// state. Create it with New, then Start, then Stop; Snapshot and Subscribe
// may be called at any time from any goroutine.
type Fleet struct {
	cfg   Config
	plan  *Plan
	log   *zap.Logger
	now   func() time.Time
	probe *prober
	sizes func(engine string) CacheSizeReader // Options.CacheSize
	subs  notifier

	// mu guards workers (AddWorker and RemoveWorker change the list once
	// Start has succeeded), the mutable fields of every worker, rnd, and the
	// lifecycle fields below it.
	mu      sync.Mutex
	workers []*worker
	rnd     *rand.Rand
	started bool               // Start was called
	stopped bool               // Stop was called, or Start failed
	cancel  context.CancelFunc // ends supervision; set by a successful Start

	hurry chan struct{}  // closed by Stop when its ctx ends: skip the grace period
	wg    sync.WaitGroup // supervisors and the health loop

	// reconcileMu serialises Reconcile and guards discovered: the workers
	// each discovery source added, by source and name.
	reconcileMu sync.Mutex
	discovered  map[string]map[string]ExternalWorker
}

// worker is the fleet's record of one worker.
type worker struct {
	spec      WorkerSpec // immutable
	added     bool       // immutable: added by AddWorker, not from the plan
	unhealthy chan int   // one slot: the health loop reports process generation gen unhealthy

	// Guarded by Fleet.mu.
	state    State
	since    time.Time
	pid      int
	restarts int
	lastErr  string
	fails    int  // consecutive failed health checks
	gen      int  // process generation, incremented on each start; stale probe results are dropped
	probing  bool // the health loop checks this worker
	// reported is what the process's engine reported of itself (KV cache
	// size, context length); reportTries counts the reads of it. Both reset
	// when the process may have been replaced (resetReportsLocked).
	reported    reports
	reportTries int
	removed     bool // a plan worker taken out of the membership by RemoveWorker
}

// New validates cfg, computes its Plan and creates the run directory (a
// fresh one under os.TempDir() when run_dir is empty). It starts nothing.
func New(cfg Config, opts Options) (*Fleet, error) {
	opts = opts.withDefaults()
	plan, err := NewPlan(cfg, opts)
	if err != nil {
		return nil, err
	}
	if plan.RunDir == AutoRunDir {
		dir, err := os.MkdirTemp("", "duet-")
		if err != nil {
			return nil, fmt.Errorf("creating run directory: %w", err)
		}
		plan = plan.withRunDir(dir)
	} else if err := os.MkdirAll(plan.RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("run_dir: %w", err)
	}
	f := &Fleet{
		cfg:   cfg,
		plan:  plan,
		log:   opts.Logger,
		now:   opts.Now,
		probe: newProber(cfg.HealthTimeout),
		sizes: opts.CacheSize,
		rnd:   opts.Rand,
		hurry: make(chan struct{}),
	}
	now := f.now()
	for _, s := range plan.Workers {
		w := specWorker(&s)
		f.workers = append(f.workers, &worker{spec: s, unhealthy: make(chan int, 1), state: w.State, since: now})
	}
	return f, nil
}

// Plan returns the plan the fleet runs, with its real run directory. The
// caller must not modify it.
func (f *Fleet) Plan() *Plan { return f.plan }

// Snapshot returns the current state of every worker: the plan's workers in
// plan order (context workers first, including those RemoveWorker took out,
// with Removed set), then the workers AddWorker added, in the order added.
func (f *Fleet) Snapshot() []Worker {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Worker, len(f.workers))
	for i, w := range f.workers {
		out[i] = Worker{
			Name:           w.spec.Name,
			Role:           w.spec.Role,
			URL:            w.spec.URL,
			SidePort:       w.spec.SidePort,
			GPUs:           append([]string(nil), w.spec.GPUs...),
			PID:            w.pid,
			External:       w.spec.External,
			Removed:        w.removed,
			State:          w.state,
			Since:          w.since,
			Restarts:       w.restarts,
			LastError:      w.lastErr,
			KVCacheTokens:  w.reported.kvCacheTokens,
			KVBlockSize:    w.reported.kvBlockSize,
			MaxModelLen:    w.reported.maxModelLen,
			Adapters:       slices.Concat(w.spec.Adapters, w.reported.adapters),
			KVEvents:       w.spec.KVEvents,
			KVEventsReplay: w.spec.KVEventsReplay,
		}
	}
	return out
}

// Subscribe returns a channel that receives a value after a worker's State,
// PID or Restarts changed and after AddWorker or RemoveWorker, and a function that ends the subscription and
// closes the channel. Signals coalesce (one slot per subscriber): on a
// signal, read Snapshot. The channel is closed when the fleet stops, so
// `for range ch` ends with it. The returned function may be called more
// than once.
func (f *Fleet) Subscribe() (<-chan struct{}, func()) { return f.subs.subscribe() }

// setStateLocked moves w to state, records errText (when not empty) as its
// last error, logs and notifies subscribers; f.mu is held.
func (f *Fleet) setStateLocked(w *worker, state State, errText string) {
	if errText != "" {
		w.lastErr = errText
	}
	if w.state == state {
		f.subs.notify()
		return
	}
	w.state, w.since = state, f.now()
	fields := []zap.Field{zap.String("worker", w.spec.Name), zap.String("role", string(w.spec.Role)), zap.String("state", string(state))}
	if w.pid != 0 {
		fields = append(fields, zap.Int("pid", w.pid))
	}
	if errText != "" && state != StateUp {
		f.log.Warn("worker state changed", append(fields, zap.String("error", errText))...)
	} else {
		f.log.Info("worker state changed", fields...)
	}
	f.subs.notify()
}

// setState is setStateLocked taking f.mu; update, when not nil, runs first
// under the same lock.
func (f *Fleet) setState(w *worker, state State, errText string, update func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if update != nil {
		update()
	}
	f.setStateLocked(w, state, errText)
}

// resetReportsLocked forgets what w's engine reported, to read it again
// from the process that comes up next; f.mu is held.
func (w *worker) resetReportsLocked() { w.reported, w.reportTries = reports{}, 0 }

// random returns a uniform number in [0, 1) for restart jitter.
func (f *Fleet) random() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rnd.Float64()
}

// Stop stops the fleet: no more restarts or health checks; every worker's
// process group gets SIGTERM and, after ShutdownGrace (or as soon as ctx
// ends), SIGKILL. It returns once every process has exited and every
// goroutine of the fleet has returned, with ctx's error if the grace period
// was cut short. Workers end in StateStopped and subscriptions are closed.
// Stop must not run concurrently with Start (cancel Start's ctx instead);
// calling it again, or after a failed Start, does nothing.
func (f *Fleet) Stop(ctx context.Context) error {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil
	}
	f.stopped = true
	cancel := f.cancel
	f.mu.Unlock()
	var err error
	if cancel != nil {
		cancel()
		done := make(chan struct{})
		go func() { // joined below on both paths
			f.wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			close(f.hurry)
			<-done
			err = fmt.Errorf("stopping fleet: grace period cut short: %w", ctx.Err())
		}
	}
	f.finish()
	f.log.Info("fleet stopped")
	return err
}

// finish marks every worker stopped and closes the subscriptions.
func (f *Fleet) finish() {
	f.mu.Lock()
	for _, w := range f.workers {
		w.probing, w.pid = false, 0
		if w.state != StateStopped {
			w.state, w.since = StateStopped, f.now()
		}
	}
	f.mu.Unlock()
	f.subs.notify()
	f.subs.close()
}

// errStopped is returned by Start on a stopped fleet.
var errStopped = errors.New("fleet stopped")
