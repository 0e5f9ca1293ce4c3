package workers

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// supervise owns one managed worker from its successful launch until ctx
// ends: it marks the worker down when its process exits, stops it when the
// health loop reports it unhealthy and the policy allows a restart, and
// restarts it under its restart policy. When ctx ends it stops the process
// (SIGTERM, grace, SIGKILL) and returns. It is a goroutine owned by the
// fleet and joined by Stop.
func (f *Fleet) supervise(ctx context.Context, w *worker, p *proc) {
	defer f.wg.Done()
	var history []time.Time // restart times within the policy's interval
	for p != nil {
		select {
		case <-ctx.Done():
			p.terminate(f.cfg.ShutdownGrace, f.hurry)
			return
		case <-p.done:
			reason := "exited: " + exitText(p.err)
			f.setState(w, StateDown, reason, func() { w.pid, w.probing = 0, false })
			p = f.restart(ctx, w, &history, reason)
		case gen := <-w.unhealthy:
			f.mu.Lock()
			stale := gen != w.gen // about a process that was replaced meanwhile
			f.mu.Unlock()
			if stale {
				continue
			}
			if d := f.decide(w, &history); !d.Restart {
				f.log.Warn("unhealthy worker left running", zap.String("worker", w.spec.Name), zap.String("reason", d.Reason))
				continue
			}
			f.mu.Lock()
			reason := w.lastErr
			w.probing = false
			f.mu.Unlock()
			f.log.Warn("stopping unhealthy worker", zap.String("worker", w.spec.Name), zap.Int("pid", p.pid))
			p.terminate(f.cfg.ShutdownGrace, f.hurry)
			f.setState(w, StateDown, "", func() { w.pid = 0 })
			p = f.restart(ctx, w, &history, reason)
		}
	}
}

// decide applies the restart policy to w now, pruning history.
func (f *Fleet) decide(w *worker, history *[]time.Time) RestartDecision {
	now := f.now()
	*history = pruneHistory(*history, now, w.spec.Restart.Interval)
	return DecideRestart(w.spec.Restart, *history, now, f.random())
}

// restart relaunches the down worker w, waiting as the policy says before
// each attempt, until an attempt passes its health check (the new process
// is returned), the policy refuses (w is failed; nil) or ctx ends (nil).
func (f *Fleet) restart(ctx context.Context, w *worker, history *[]time.Time, reason string) *proc {
	for {
		d := f.decide(w, history)
		if !d.Restart {
			f.setState(w, StateFailed, fmt.Sprintf("%s; %s", reason, d.Reason), nil)
			return nil
		}
		f.log.Info("restarting worker", zap.String("worker", w.spec.Name), zap.Duration("after", d.Wait), zap.String("reason", reason))
		t := time.NewTimer(d.Wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		*history = append(*history, f.now())
		f.mu.Lock()
		w.restarts++
		f.mu.Unlock()
		p, err := f.launch(ctx, w, false)
		if err == nil {
			return p
		}
		if ctx.Err() != nil {
			return nil
		}
		f.mu.Lock()
		reason = w.lastErr // the short form of err, without the log tail
		f.mu.Unlock()
	}
}
