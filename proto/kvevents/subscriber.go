package kvevents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/go-zeromq/zmq4"
	"go.uber.org/zap"
)

// Subscriber reads one ZeroMQ KV event stream (one publisher when connecting;
// any number, told apart by topic, when binding), checks sequence numbers,
// fills gaps from the replay endpoint, and hands batches to a Sink through a
// bounded queue. Create it with NewSubscriber and start it with Run.
type Subscriber struct {
	cfg  SubscriberConfig
	sink Sink
	log  *zap.Logger

	// queue carries batches and resets from the reader (Run's goroutine, the
	// only sender) to the sink goroutine (the only receiver).
	queue chan item

	// streams is the per-topic sequence state; only the reader touches it.
	streams map[string]*stream

	stats subscriberCounters

	// addr is the listening address in bind mode, set by the reader.
	addr atomic.Pointer[net.Addr]
}

// item is one queue entry: a batch, or a reset of topics.
type item struct {
	batch  Batch
	reset  []string // non-nil: reset these topics
	reason ResetReason
}

// subscriberCounters are the live counters behind Stats.
type subscriberCounters struct {
	batches, events, replayed, gaps, resets, malformed, dropped atomic.Uint64
	lastSeq                                                     atomic.Uint64
	lastBatch                                                   atomic.Int64
	connected                                                   atomic.Bool
}

// SubscriberStats is a snapshot of a Subscriber's counters.
type SubscriberStats struct {
	Batches   uint64    // batches received live and decoded
	Events    uint64    // events in those batches
	Replayed  uint64    // batches recovered through replay
	Gaps      uint64    // sequence gaps seen
	Resets    uint64    // topic resets queued for the Sink
	Malformed uint64    // frames or payloads that did not decode
	Dropped   uint64    // batches discarded: queue overflow or too many topics
	LastSeq   uint64    // sequence number of the last batch received
	Connected bool      // a connection (connect mode) or listener (bind mode) is up
	LastBatch time.Time // when the last batch was received; zero if none
}

// checkSink refuses a nil sink and turns a nil log into a no-op one: what
// every reader of a worker's events starts with.
func checkSink(sink Sink, log *zap.Logger) (*zap.Logger, error) {
	if sink == nil {
		return nil, errors.New("kvevents: nil sink")
	}
	if log == nil {
		log = zap.NewNop()
	}
	return log, nil
}

// NewSubscriber returns a Subscriber for cfg (after Defaults) feeding sink.
// It fails if cfg is invalid. log may be nil (no logging).
func NewSubscriber(cfg SubscriberConfig, sink Sink, log *zap.Logger) (*Subscriber, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log, err := checkSink(sink, log)
	if err != nil {
		return nil, err
	}
	return &Subscriber{
		cfg:     cfg,
		sink:    sink,
		log:     log.With(zap.String("endpoint", cfg.Endpoint), zap.String("topic", cfg.Topic)),
		queue:   make(chan item, cfg.QueueSize),
		streams: make(map[string]*stream),
	}, nil
}

// Stats returns a snapshot of the counters. Safe for concurrent use.
func (s *Subscriber) Stats() SubscriberStats {
	st := SubscriberStats{
		Batches:   s.stats.batches.Load(),
		Events:    s.stats.events.Load(),
		Replayed:  s.stats.replayed.Load(),
		Gaps:      s.stats.gaps.Load(),
		Resets:    s.stats.resets.Load(),
		Malformed: s.stats.malformed.Load(),
		Dropped:   s.stats.dropped.Load(),
		LastSeq:   s.stats.lastSeq.Load(),
		Connected: s.stats.connected.Load(),
	}
	if ns := s.stats.lastBatch.Load(); ns != 0 {
		st.LastBatch = time.Unix(0, ns)
	}
	return st
}

// Addr returns the address the subscriber listens on in bind mode (useful
// with port 0), or nil before it listens and in connect mode.
func (s *Subscriber) Addr() net.Addr {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return nil
}

// Run reads the stream until ctx is done, reconnecting with backoff when the
// connection drops or cannot be made, and returns nil then. It starts one
// goroutine that calls the Sink and waits for it before returning, after the
// Sink has been handed everything already queued. Run must be called once.
func (s *Subscriber) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.deliver()
	}()
	s.read(ctx)
	close(s.queue)
	wg.Wait()
	return nil
}

// deliver is the sink goroutine: it drains the queue until it is closed.
func (s *Subscriber) deliver() {
	for it := range s.queue {
		if it.reset != nil {
			for _, topic := range it.reset {
				s.sink.Reset(topic, it.reason)
			}
			continue
		}
		s.sink.Apply(it.batch)
	}
}

// read is the network reader loop: one session per connection (or listener).
func (s *Subscriber) read(ctx context.Context) {
	backoff := s.cfg.MinBackoff
	for ctx.Err() == nil {
		received, err := s.session(ctx)
		s.stats.connected.Store(false)
		if ctx.Err() != nil {
			return
		}
		if received {
			backoff = s.cfg.MinBackoff
		}
		s.log.Warn("kv event stream interrupted; reconnecting", zap.Error(err), zap.Duration("backoff", backoff))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}

// session opens the SUB socket, reads until the connection fails or ctx is
// done, and reports whether any message arrived. In bind mode a dropped
// publisher connection does not end the session; the listener stays.
func (s *Subscriber) session(ctx context.Context) (received bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := zmq4.NewSub(sctx,
		zmq4.WithDialerMaxRetries(0), // Run retries, with backoff and ctx
		zmq4.WithDialerTimeout(s.cfg.DialTimeout),
		zmq4.WithLogger(zap.NewStdLog(s.log)))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, s.cfg.Topic); err != nil {
		return false, fmt.Errorf("subscribe %q: %w", s.cfg.Topic, err)
	}
	ep := boundedEndpoint(s.cfg.Endpoint)
	if s.cfg.Bind {
		err = sub.Listen(ep)
	} else {
		err = sub.Dial(ep)
	}
	if err != nil {
		return false, err
	}
	if a := sub.Addr(); a != nil {
		s.addr.Store(&a)
	}
	s.stats.connected.Store(true)
	s.log.Info("kv event stream connected", zap.Bool("bind", s.cfg.Bind))
	for {
		msg, err := sub.Recv()
		if sctx.Err() != nil {
			return received, sctx.Err()
		}
		if err != nil {
			if s.cfg.Bind {
				s.log.Debug("kv event publisher connection ended", zap.Error(err))
				continue
			}
			return received, err
		}
		if msg.Type == zmq4.CmdMsg {
			continue
		}
		received = true
		s.handle(ctx, msg.Frames)
	}
}

// handle processes one live message: sequence check (replay or reset), then
// decode and queue.
func (s *Subscriber) handle(ctx context.Context, frames [][]byte) {
	f, err := parseLive(frames)
	if err != nil {
		s.stats.malformed.Add(1)
		s.log.Warn("malformed kv event frame", zap.Error(err))
		if len(frames) > 0 {
			if st, ok := s.streams[string(frames[0])]; ok {
				st.started = false // no usable sequence: take the next one as a fresh start
				s.reset([]string{string(frames[0])}, ResetMalformed)
			}
		}
		return
	}
	st := s.stream(f.topic)
	if st == nil {
		s.stats.dropped.Add(1)
		s.log.Warn("kv event topic dropped: too many topics", zap.String("frame_topic", f.topic),
			zap.Int("max_streams", s.cfg.MaxStreams))
		return
	}
	s.stats.lastSeq.Store(f.seq)
	s.stats.lastBatch.Store(s.cfg.Now().UnixNano())
	switch st.classify(f.seq) {
	case seqRestart:
		s.log.Info("kv event publisher restarted", zap.String("frame_topic", f.topic),
			zap.Uint64("last_seq", st.last), zap.Uint64("seq", f.seq))
		s.reset([]string{f.topic}, ResetRestart)
	case seqGap:
		s.stats.gaps.Add(1)
		if !s.fillGap(ctx, f.topic, st, f.seq) {
			s.reset([]string{f.topic}, ResetGap)
		}
	}
	st.advance(f.seq, xxhash.Sum64(f.payload))
	b, err := DecodeBatch(f.payload)
	if err != nil {
		s.stats.malformed.Add(1)
		s.log.Warn("malformed kv event batch", zap.String("frame_topic", f.topic), zap.Uint64("seq", f.seq), zap.Error(err))
		s.reset([]string{f.topic}, ResetMalformed)
		return
	}
	b.Topic, b.Seq = f.topic, f.seq
	s.stats.batches.Add(1)
	s.stats.events.Add(uint64(len(b.Events)))
	s.enqueue(item{batch: b})
}

// stream returns the state of topic, creating it, or nil if MaxStreams
// topics are already tracked.
func (s *Subscriber) stream(topic string) *stream {
	if st, ok := s.streams[topic]; ok {
		return st
	}
	if len(s.streams) >= s.cfg.MaxStreams {
		return nil
	}
	st := &stream{}
	s.streams[topic] = st
	return st
}

// fillGap asks the replay endpoint for the batches between st.last and seq.
// It requests from st.last itself and checks that batch against the payload
// hash it has, so a restarted publisher whose numbers happen to run past ours
// is recognised instead of spliced in. Batches it recovers are queued and
// st advanced; it reports whether every missing batch was recovered.
func (s *Subscriber) fillGap(ctx context.Context, topic string, st *stream, seq uint64) bool {
	if s.cfg.ReplayEndpoint == "" {
		return false
	}
	from := st.last
	verified := false
	err := s.fetchReplay(ctx, from, func(rep replayReply) error {
		if !verified {
			if rep.seq != from || xxhash.Sum64(rep.payload) != st.lastHash {
				return fmt.Errorf("replay starts at seq %d, not at our last batch %d: buffer too short or another publisher", rep.seq, from)
			}
			verified = true
			return nil
		}
		if rep.seq >= seq {
			return errReplayDone // the live batch and after arrive on the SUB socket
		}
		if rep.seq != st.last+1 {
			return fmt.Errorf("replay skipped from %d to %d", st.last, rep.seq)
		}
		b, err := DecodeBatch(rep.payload)
		if err != nil {
			s.stats.malformed.Add(1)
			return fmt.Errorf("replayed seq %d: %w", rep.seq, err)
		}
		b.Topic, b.Seq = topic, rep.seq
		st.advance(rep.seq, xxhash.Sum64(rep.payload))
		s.stats.replayed.Add(1)
		s.enqueue(item{batch: b})
		return nil
	})
	filled := (err == nil || errors.Is(err, errReplayDone)) && verified && st.last+1 == seq
	if !filled {
		s.log.Warn("kv event gap not filled by replay", zap.String("frame_topic", topic),
			zap.Uint64("from", from), zap.Uint64("to", seq), zap.Error(err))
	}
	return filled
}

// reset queues a reset of topics.
func (s *Subscriber) reset(topics []string, reason ResetReason) {
	s.enqueue(item{reset: topics, reason: reason})
}

// enqueue hands it to the sink goroutine without blocking. When the queue is
// full it discards everything queued, and it itself, and queues one reset of
// every topic that lost a batch: memory stays bounded by QueueSize, and the
// Sink never applies a batch that follows a lost one without a reset between.
func (s *Subscriber) enqueue(it item) {
	select {
	case s.queue <- it:
		s.countReset(it)
		return
	default:
	}
	lost := map[string]bool{}
	note := func(it item) {
		if it.reset != nil {
			for _, t := range it.reset {
				lost[t] = true
			}
			return
		}
		lost[it.batch.Topic] = true
		s.stats.dropped.Add(1)
	}
	note(it)
	for drained := false; !drained; {
		select {
		case old := <-s.queue:
			note(old)
		default:
			drained = true
		}
	}
	topics := make([]string, 0, len(lost))
	for t := range lost {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	s.log.Warn("kv event sink too slow: queue discarded", zap.Strings("topics", topics))
	r := item{reset: topics, reason: ResetOverflow}
	s.queue <- r // cannot block: the queue is empty and this goroutine is its only sender
	s.countReset(r)
}

func (s *Subscriber) countReset(it item) {
	if it.reset != nil {
		s.stats.resets.Add(uint64(len(it.reset)))
	}
}
