package loadgen

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressBar reports a phase's progress: on a TTY one line redrawn with
// \r, otherwise a plain line every interval.
type progressBar struct {
	w        io.Writer
	tty      bool
	p        *phase
	total    int              // expected requests, 0 when unknown
	duration time.Duration    // phase duration, 0 when bounded otherwise
	now      func() time.Time // the run's clock
	start    time.Time
	quit     chan struct{}
	wg       sync.WaitGroup
}

// startProgress starts the bar of phase p; its stop method ends it. With no
// writer it does nothing.
func (r *runner) startProgress(p *phase, total int, duration time.Duration) *progressBar {
	b := &progressBar{w: r.opts.Progress, tty: r.opts.ProgressTTY, p: p, total: total, duration: duration,
		now: r.clock.now, start: r.clock.now(), quit: make(chan struct{})}
	if b.w == nil {
		return b
	}
	interval := r.opts.ProgressInterval
	if interval <= 0 {
		interval = 5 * time.Second
		if b.tty {
			interval = 200 * time.Millisecond
		}
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				b.draw(false)
			case <-b.quit:
				return
			}
		}
	}()
	return b
}

func (b *progressBar) stop() {
	if b.w == nil {
		return
	}
	close(b.quit)
	b.wg.Wait()
	b.draw(true)
}

func (b *progressBar) draw(final bool) {
	line := b.line(b.now().Sub(b.start))
	if b.tty {
		end := ""
		if final {
			end = "\n"
		}
		fmt.Fprintf(b.w, "\r%s\x1b[K%s", line, end)
		return
	}
	fmt.Fprintln(b.w, line)
}

// line renders e.g. "Profiling: 45/150 |######----| 30% [00:12<00:28] errors 0, in flight 8".
func (b *progressBar) line(elapsed time.Duration) string {
	done := b.p.done.Load()
	frac := -1.0
	count := fmt.Sprintf("%d", done)
	switch {
	case b.total > 0:
		frac = float64(done) / float64(b.total)
		count = fmt.Sprintf("%d/%d", done, b.total)
	case b.duration > 0:
		frac = elapsed.Seconds() / b.duration.Seconds()
	}
	name := strings.ToUpper(b.p.name[:1]) + b.p.name[1:]
	var bar, eta string
	if frac >= 0 {
		frac = min(frac, 1)
		const width = 24
		fill := int(frac * width)
		bar = fmt.Sprintf(" |%s%s| %3.0f%%", strings.Repeat("█", fill), strings.Repeat("░", width-fill), frac*100)
		if frac > 0 {
			eta = "<" + clock(time.Duration(float64(elapsed)/frac)-elapsed)
		}
	}
	return fmt.Sprintf("%s: %s%s [%s%s] errors %d, in flight %d", name, count, bar, clock(elapsed), eta,
		b.p.failed.Load(), b.p.active.Load())
}

// clock formats a duration as mm:ss (h:mm:ss past an hour).
func clock(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	if s < 0 {
		s = 0
	}
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%02d:%02d", s/60, s%60)
}
