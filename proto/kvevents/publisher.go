package kvevents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"go.uber.org/zap"
)

// PublisherConfig configures a Publisher, after vLLM's KVEventsConfig
// (vllm/config/kv_events.py). Defaults() fills the zero fields.
type PublisherConfig struct {
	// Endpoint is the PUB endpoint, e.g. "tcp://*:5557" or "tcp://127.0.0.1:0".
	// Required.
	Endpoint string
	// Connect dials Endpoint (a subscriber that binds) instead of binding it.
	// vLLM decides by the endpoint's text ("*", "::", ipc://, inproc:// bind);
	// here it is explicit.
	Connect bool
	// ReplayEndpoint is the ROUTER endpoint to bind for replay requests; ""
	// for none.
	ReplayEndpoint string
	// BufferSteps is the number of recent batches kept for replay. Default
	// 10000 (vLLM's buffer_steps).
	BufferSteps int
	// HWM bounds the messages queued for sending; more are dropped, as a
	// ZeroMQ PUB does. Default 100000 (vLLM's hwm).
	HWM int
	// Topic is sent as the first frame of every message. Default "".
	Topic string
	// DataParallelRank is stamped on every batch, as vLLM's publisher does;
	// nil leaves it out.
	DataParallelRank *int64
	// Layout is the event layout. Default LayoutMap (current vLLM).
	Layout Layout
	// Now is the clock for batch timestamps. Default time.Now.
	Now func() time.Time
}

// Defaults returns c with every zero field set to its default.
func (c PublisherConfig) Defaults() PublisherConfig {
	if c.BufferSteps == 0 {
		c.BufferSteps = 10_000
	}
	if c.HWM == 0 {
		c.HWM = 100_000
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks c after Defaults; errors name the field.
func (c PublisherConfig) Validate() error {
	if err := validateEndpoint("kvevents.publisher.endpoint", c.Endpoint); err != nil {
		return err
	}
	if c.ReplayEndpoint != "" {
		if err := validateEndpoint("kvevents.publisher.replay_endpoint", c.ReplayEndpoint); err != nil {
			return err
		}
	}
	if c.BufferSteps <= 0 {
		return errors.New("kvevents.publisher.buffer_steps: must be > 0")
	}
	if c.HWM <= 0 {
		return errors.New("kvevents.publisher.hwm: must be > 0")
	}
	if c.Layout != LayoutMap && c.Layout != LayoutArray {
		return fmt.Errorf("kvevents.publisher.layout: %d: want map or array", c.Layout)
	}
	return nil
}

// ErrPublisherClosed is returned by Publish and Skip after Close.
var ErrPublisherClosed = errors.New("kvevents: publisher closed")

// Publisher publishes KV event batches in vLLM's wire format: a PUB socket
// sending (topic, 8-byte big-endian sequence, msgpack batch), sequence numbers
// from 0, and an optional ROUTER replay socket answering from a bounded buffer
// of recent batches. It is what duet's simulated worker uses to look like an
// engine. Publish is safe for concurrent use.
type Publisher struct {
	cfg    PublisherConfig
	log    *zap.Logger
	cancel context.CancelFunc
	pub    zmq4.Socket
	router zmq4.Socket // nil without replay
	wg     sync.WaitGroup

	// mu orders publishing: sequence assignment, send and buffering happen
	// together, so sequence order is send order. It guards the fields below.
	mu     sync.Mutex
	next   uint64
	ring   []buffered // len <= BufferSteps; ring[head] is the oldest once full
	head   int
	closed bool
}

// buffered is one published batch kept for replay.
type buffered struct {
	seq     uint64
	payload []byte
}

// NewPublisher binds (or, with Connect, starts dialling) the PUB endpoint and
// binds the replay endpoint. log may be nil. Close releases both.
func NewPublisher(cfg PublisherConfig, log *zap.Logger) (*Publisher, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("endpoint", cfg.Endpoint), zap.String("topic", cfg.Topic))
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{cfg: cfg, log: log, cancel: cancel}
	opts := []zmq4.Option{zmq4.WithLogger(zap.NewStdLog(log)), zmq4.WithTimeout(time.Second)}
	if cfg.Connect {
		opts = append(opts, zmq4.WithDialerMaxRetries(-1), zmq4.WithDialerRetry(50*time.Millisecond),
			zmq4.WithAutomaticReconnect(true))
	}
	p.pub = zmq4.NewPub(ctx, opts...)
	if err := p.pub.SetOption(zmq4.OptionHWM, cfg.HWM); err != nil {
		p.Close()
		return nil, fmt.Errorf("kvevents: publisher hwm: %w", err)
	}
	if cfg.Connect {
		p.wg.Add(1)
		go func() { // zmq4's Dial retries until it connects or ctx is done
			defer p.wg.Done()
			if err := p.pub.Dial(boundedEndpoint(cfg.Endpoint)); err != nil && ctx.Err() == nil {
				log.Warn("kv event publisher could not connect", zap.Error(err))
			}
		}()
	} else if err := p.pub.Listen(boundedEndpoint(cfg.Endpoint)); err != nil {
		p.Close()
		return nil, fmt.Errorf("kvevents: publisher listen %s: %w", cfg.Endpoint, err)
	}
	if cfg.ReplayEndpoint != "" {
		p.router = zmq4.NewRouter(ctx, zmq4.WithLogger(zap.NewStdLog(log)), zmq4.WithTimeout(time.Second))
		if err := p.router.Listen(boundedEndpoint(cfg.ReplayEndpoint)); err != nil {
			p.Close()
			return nil, fmt.Errorf("kvevents: publisher replay listen %s: %w", cfg.ReplayEndpoint, err)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serveReplay(ctx)
		}()
	}
	return p, nil
}

// Addr returns the bound PUB address (nil with Connect).
func (p *Publisher) Addr() net.Addr { return p.pub.Addr() }

// ReplayAddr returns the bound replay address (nil without replay).
func (p *Publisher) ReplayAddr() net.Addr {
	if p.router == nil {
		return nil
	}
	return p.router.Addr()
}

// Publish encodes events as one batch stamped with the clock and the
// configured rank, assigns it the next sequence number, sends it and keeps it
// for replay. It returns the sequence number. Without a connected subscriber
// the batch is dropped, as with any ZeroMQ PUB, but still numbered and kept.
func (p *Publisher) Publish(events ...Event) (uint64, error) {
	return p.publish(events, true)
}

// publish is Publish; live false skips the send (tests use it to lose a batch).
func (p *Publisher) publish(events []Event, live bool) (uint64, error) {
	b := Batch{TS: float64(p.cfg.Now().UnixNano()) / 1e9, Events: events, DataParallelRank: p.cfg.DataParallelRank}
	payload, err := EncodeBatch(b, p.cfg.Layout)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	seq, err := p.takeSeq()
	if err != nil {
		return 0, err
	}
	if live {
		msg := zmq4.NewMsgFrom([]byte(p.cfg.Topic), seqBytes(seq), payload)
		if err := p.pub.SendMulti(msg); err != nil {
			return seq, fmt.Errorf("kvevents: publish seq %d: %w", seq, err)
		}
	}
	p.keep(buffered{seq: seq, payload: payload})
	return seq, nil
}

// Skip consumes the next sequence number without sending or keeping a batch,
// and returns it. It is for a batch the caller lost before Publish (its own
// queue overflowed): the next published batch then shows a gap, and since
// the skipped number is in no replay buffer, a Subscriber cannot fill it and
// resets the topic (ResetGap), as it would after a batch lost on the wire.
// Without a later Publish nobody sees the gap. Skip is safe for concurrent
// use and fails with ErrPublisherClosed after Close.
func (p *Publisher) Skip() (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.takeSeq()
}

// takeSeq returns the next sequence number and advances it, or fails after
// Close; p.mu must be held.
func (p *Publisher) takeSeq() (uint64, error) {
	if p.closed {
		return 0, ErrPublisherClosed
	}
	seq := p.next
	p.next++
	return seq, nil
}

// keep appends to the replay ring, overwriting the oldest when full. Caller
// holds mu.
func (p *Publisher) keep(b buffered) {
	if p.router == nil {
		return
	}
	if len(p.ring) < p.cfg.BufferSteps {
		p.ring = append(p.ring, b)
		return
	}
	p.ring[p.head] = b
	p.head = (p.head + 1) % len(p.ring)
}

// since returns the buffered batches with seq >= start, oldest first.
func (p *Publisher) since(start uint64) []buffered {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []buffered
	for i := range p.ring {
		b := p.ring[(p.head+i)%len(p.ring)]
		if b.seq >= start {
			out = append(out, b)
		}
	}
	return out
}

// serveReplay answers replay requests until ctx is done, as vLLM's
// _service_replay does: for a request [identity, "", start] it sends
// [identity, "", topic, seq, payload] per buffered batch from start on, then
// [identity, "", "", -1, ""].
func (p *Publisher) serveReplay(ctx context.Context) {
	for {
		msg, err := p.router.Recv()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			continue // one client's connection ended
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			p.log.Warn("invalid kv event replay request", zap.Int("frames", len(msg.Frames)))
			continue
		}
		id := msg.Frames[0]
		start := uint64FromFrame(msg.Frames[2])
		for _, b := range p.since(start) {
			reply := zmq4.NewMsgFrom(id, []byte{}, []byte(p.cfg.Topic), seqBytes(b.seq), b.payload)
			if err := p.router.SendMulti(reply); err != nil {
				p.log.Warn("kv event replay send failed", zap.Error(err))
				break
			}
		}
		_ = p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, []byte{}, seqBytes(endSeq), []byte{}))
	}
}

// Close stops the replay goroutine and closes the sockets. Publish and Skip
// fail afterwards. Close is idempotent. One goroutine of zmq4's PUB socket
// outlives it (see the package doc, Concurrency).
func (p *Publisher) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if already {
		return nil
	}
	p.cancel()
	var err error
	if p.pub != nil {
		err = ignoreClosed(p.pub.Close())
	}
	if p.router != nil {
		err = errors.Join(err, ignoreClosed(p.router.Close()))
	}
	p.wg.Wait()
	return err
}

// ignoreClosed drops net.ErrClosed: zmq4's Close closes every connection
// of the socket, and one whose peer left may already be closed by its
// reader, which is no failure of Close.
func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
