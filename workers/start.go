package workers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// StartError reports a worker that did not become healthy, with the end of
// its log.
type StartError struct {
	// Worker is the worker's name.
	Worker string
	// Err says what went wrong (exit, timeout, cancellation).
	Err error
	// LogPath is the worker's log file.
	LogPath string
	// Tail holds the last lines the worker printed, oldest first.
	Tail []string
}

// Error returns the worker, the cause and the log tail, one line each.
func (e *StartError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v", e.Worker, e.Err)
	if len(e.Tail) == 0 {
		fmt.Fprintf(&b, " (it printed nothing; log %s)", e.LogPath)
		return b.String()
	}
	fmt.Fprintf(&b, "; last %d lines of %s:", len(e.Tail), e.LogPath)
	for _, l := range e.Tail {
		b.WriteString("\n    ")
		b.WriteString(l)
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *StartError) Unwrap() error { return e.Err }

// Start writes the generated files, launches every managed worker in
// parallel and waits until each passed a health check (within its
// start_timeout), checks the external workers once, then supervises the
// fleet until Stop. The first worker that fails to start cancels the other
// launches; Start then stops the workers it started and returns the
// failures joined (launches it cancelled itself are left out), each a
// *StartError where a process ran; the fleet is then stopped. The same
// happens when ctx ends first. ctx bounds the launch only.
func (f *Fleet) Start(ctx context.Context) error {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return fmt.Errorf("starting fleet: %w", errStopped)
	}
	if f.started {
		f.mu.Unlock()
		return errors.New("starting fleet: already started")
	}
	f.started = true
	f.mu.Unlock()

	if err := f.prepare(); err != nil {
		f.abort(nil)
		return fmt.Errorf("starting fleet: %w", err)
	}
	f.log.Info("launching fleet", zap.Int("workers", len(f.workers)), zap.String("run_dir", f.plan.RunDir))
	// The first failure cancels the other launches: no point waiting for a
	// slow engine's start timeout when the fleet cannot come up anyway.
	launchCtx, cancelLaunch := context.WithCancel(ctx)
	defer cancelLaunch()
	procs := make([]*proc, len(f.workers))
	errs := make([]error, len(f.workers))
	var wg sync.WaitGroup
	for i, w := range f.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w.spec.External {
				f.checkExternal(launchCtx, w)
				return
			}
			procs[i], errs[i] = f.launch(launchCtx, w, true)
			if errs[i] != nil {
				cancelLaunch()
			}
		}()
	}
	wg.Wait()
	if ctx.Err() == nil {
		for i, err := range errs { // keep the causes, drop the launches they cancelled
			if errors.Is(err, context.Canceled) {
				errs[i] = nil
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		f.abort(procs)
		return fmt.Errorf("starting fleet: %w", err)
	}

	f.mu.Lock()
	if f.stopped { // Stop ran meanwhile, against the contract; do not leak
		f.mu.Unlock()
		f.abort(procs)
		return fmt.Errorf("starting fleet: %w", errStopped)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.cancel = cancel
	for i, w := range f.workers {
		if procs[i] != nil {
			f.wg.Add(1)
			go f.supervise(runCtx, w, procs[i])
		}
	}
	f.wg.Add(1)
	go f.healthLoop(runCtx)
	n := len(f.workers) // AddWorker may grow the list once f.mu is released
	f.mu.Unlock()
	f.log.Info("fleet up", zap.Int("workers", n))
	return nil
}

// prepare writes the generated files and checks that the workers' ports are
// free, so that a stray server cannot pass a new worker's health check.
func (f *Fleet) prepare() error {
	for _, file := range f.plan.Files {
		if err := os.WriteFile(file.Path, file.Content, 0o644); err != nil {
			return fmt.Errorf("writing engine config: %w", err)
		}
	}
	for _, w := range f.workers {
		if w.spec.External {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(w.spec.Host, strconv.Itoa(w.spec.Port)))
		if err != nil {
			return fmt.Errorf("%s: port %d is not free: %w", w.spec.Name, w.spec.Port, err)
		}
		l.Close()
	}
	return nil
}

// abort stops the given processes (nil entries allowed) in parallel and
// marks the fleet stopped.
func (f *Fleet) abort(procs []*proc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		if p != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.terminate(f.cfg.ShutdownGrace, f.hurry)
			}()
		}
	}
	wg.Wait()
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	f.finish()
}

// checkExternal probes a pre-launched worker once and starts watching it.
func (f *Fleet) checkExternal(ctx context.Context, w *worker) {
	err := f.probe.check(ctx, w.spec.URL+w.spec.HealthPath)
	want := f.reportsOf(w.spec.Engine)
	var res readResult
	if err == nil {
		res = f.readReports(ctx, &w.spec, want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w.probing = true
	if err != nil {
		w.fails = 1
		f.setStateLocked(w, StateDown, fmt.Sprintf("health check failed: %v", err))
		return
	}
	f.recordReportsLocked(w, want, res)
	f.setStateLocked(w, StateUp, "")
}

// launch starts w's process and waits for its first successful health
// check; on success w is up and watched by the health loop. On failure the
// process is stopped, w is down and the error is a *StartError. fresh
// truncates the log file (first launch) instead of appending (restart).
func (f *Fleet) launch(ctx context.Context, w *worker, fresh bool) (*proc, error) {
	s := &w.spec
	p, err := startProc(s, fresh, f.log)
	if err != nil {
		f.setState(w, StateDown, err.Error(), nil)
		return nil, fmt.Errorf("%s: %w", s.Name, err)
	}
	f.setState(w, StateStarting, "", func() {
		w.gen++
		w.pid, w.fails, w.probing = p.pid, 0, false
		w.resetReportsLocked()
	})
	f.log.Info("worker launched", zap.String("worker", s.Name), zap.Int("pid", p.pid),
		zap.Strings("argv", s.Argv), zap.String("log", s.LogPath))
	if err := f.waitHealthy(ctx, s, p); err != nil {
		p.terminate(f.cfg.ShutdownGrace, f.hurry)
		serr := &StartError{Worker: s.Name, Err: err, LogPath: s.LogPath, Tail: p.out.tail()}
		f.setState(w, StateDown, fmt.Sprintf("start failed: %v (log %s)", err, s.LogPath), func() { w.pid = 0 })
		return nil, serr
	}
	want := f.reportsOf(s.Engine)
	res := f.readReports(ctx, s, want) // before it is up, so that it comes up with its cache size and context length known
	f.setState(w, StateUp, "", func() {
		w.probing = true
		f.recordReportsLocked(w, want, res)
	})
	return p, nil
}

// waitHealthy polls the worker's health until it answers 200, its process
// exits, its start timeout passes or ctx ends.
func (f *Fleet) waitHealthy(ctx context.Context, s *WorkerSpec, p *proc) error {
	deadline := time.NewTimer(s.StartTimeout)
	defer deadline.Stop()
	poll := min(f.cfg.HealthInterval, 200*time.Millisecond)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	last := errors.New("no health check done")
	for {
		if err := f.probe.check(ctx, s.URL+s.HealthPath); err == nil {
			return nil
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("launch cancelled: %w", ctx.Err())
		case <-p.done:
			return fmt.Errorf("exited during start-up (%s)", exitText(p.err))
		case <-deadline.C:
			return fmt.Errorf("not healthy within %s: %v", s.StartTimeout, last)
		case <-tick.C:
		}
	}
}
