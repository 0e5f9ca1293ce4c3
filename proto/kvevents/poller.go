package kvevents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// PollerConfig configures a Poller of trtllm-serve's KV cache events.
type PollerConfig struct {
	// URL is the endpoint, e.g. "http://host:8000/kv_cache_events". Required.
	URL string
	// Topic labels the batches handed to the Sink (a worker name). Default "".
	Topic string
	// Interval is the pause between polls. Default 100ms.
	Interval time.Duration
	// Timeout bounds one request; trtllm-serve waits up to 2s for events.
	// Default 5s.
	Timeout time.Duration
	// Client sends the requests. Default a new http.Client.
	Client *http.Client
	// Now is the clock for batch timestamps. Default time.Now.
	Now func() time.Time
}

// Defaults returns c with every zero field set to its default.
func (c PollerConfig) Defaults() PollerConfig {
	if c.Interval == 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks c after Defaults; errors name the field.
func (c PollerConfig) Validate() error {
	if !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") {
		return fmt.Errorf("kvevents.poller.url: %q: want http:// or https://", c.URL)
	}
	if c.Interval < 0 || c.Timeout <= 0 {
		return errors.New("kvevents.poller.interval, timeout: must be > 0")
	}
	return nil
}

// Poller pulls TensorRT-LLM KV cache events (POST /kv_cache_events drains the
// engine's event queue) and hands them to a Sink, one Batch per attention DP
// rank per poll. Event ids must run on without a break per rank; a break (the
// engine's bounded queue overflowed, or the engine restarted) resets, as there
// is no replay. The Sink is called from the polling goroutine, so a slow Sink
// slows polling; the engine's queue then overflows and shows as a gap.
type Poller struct {
	cfg  PollerConfig
	sink Sink
	log  *zap.Logger

	// last event id per rank (-1 for no rank); only the polling goroutine
	// touches it.
	last map[int64]uint64

	polls, events, resets, failures atomic.Uint64
}

// NewPoller returns a Poller for cfg (after Defaults) feeding sink. log may be
// nil.
func NewPoller(cfg PollerConfig, sink Sink, log *zap.Logger) (*Poller, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log, err := checkSink(sink, log)
	if err != nil {
		return nil, err
	}
	return &Poller{cfg: cfg, sink: sink, log: log.With(zap.String("url", cfg.URL)), last: map[int64]uint64{}}, nil
}

// Run polls every Interval until ctx is done, then returns nil. Failed polls
// are logged and retried at the next tick.
func (p *Poller) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		if err := p.PollOnce(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("kv event poll failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// PollOnce makes one request and delivers what it returns. A body that does
// not decode resets every rank seen so far (its events are lost).
func (p *Poller) PollOnce(ctx context.Context) error {
	p.polls.Add(1)
	rctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, p.cfg.URL, nil)
	if err != nil {
		return err
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		p.failures.Add(1)
		return fmt.Errorf("poll %s: %w", p.cfg.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		p.failures.Add(1)
		return fmt.Errorf("poll %s: status %d", p.cfg.URL, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxPayloadBytes+1))
	if err != nil {
		p.failures.Add(1)
		return fmt.Errorf("poll %s: %w", p.cfg.URL, err)
	}
	events, err := DecodeTRTLLMEvents(body)
	if err != nil {
		for rank := range p.last {
			delete(p.last, rank)
		}
		p.reset(ResetMalformed)
		return err
	}
	p.deliver(events)
	return nil
}

// deliver groups events by rank, checks each rank's event ids, and applies.
func (p *Poller) deliver(events []TRTLLMEvent) {
	now := float64(p.cfg.Now().UnixNano()) / 1e9
	batches := map[int64]*Batch{}
	var order []int64
	for _, e := range events {
		rank := int64(-1)
		if e.AttentionDPRank != nil {
			rank = *e.AttentionDPRank
		}
		last, seen := p.last[rank]
		switch {
		case !seen || e.EventID == last+1:
		case e.EventID <= last:
			p.flush(batches, order)
			batches, order = map[int64]*Batch{}, nil
			p.reset(ResetRestart)
		default:
			p.flush(batches, order)
			batches, order = map[int64]*Batch{}, nil
			p.reset(ResetGap)
		}
		p.last[rank] = e.EventID
		b, ok := batches[rank]
		if !ok {
			b = &Batch{Topic: p.cfg.Topic, TS: now, DataParallelRank: e.AttentionDPRank}
			batches[rank] = b
			order = append(order, rank)
		}
		b.Seq = e.EventID
		b.Events = append(b.Events, e.Event)
		p.events.Add(1)
	}
	p.flush(batches, order)
}

func (p *Poller) flush(batches map[int64]*Batch, order []int64) {
	for _, rank := range order {
		p.sink.Apply(*batches[rank])
	}
}

// reset voids the topic: the Sink keys state by topic, and all ranks share it.
func (p *Poller) reset(reason ResetReason) {
	p.resets.Add(1)
	p.sink.Reset(p.cfg.Topic, reason)
}
