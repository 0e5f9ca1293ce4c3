package kvevents

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"
)

// waitFor polls cond until it holds, failing the test after a generous
// deadline. Timing never decides a test's outcome, only how long it waits.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type resetRec struct {
	topic  string
	reason ResetReason
}

// recSink records what a Subscriber hands it. With gate set, Apply blocks
// until the gate is closed.
type recSink struct {
	gate chan struct{}

	mu      sync.Mutex // guards the fields below
	batches []Batch
	resets  []resetRec
	order   []string // "apply <seq>" / "reset <reason>", in call order
}

var _ Sink = (*recSink)(nil)

func (r *recSink) Apply(b Batch) {
	r.mu.Lock()
	gate := r.gate
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, b)
	r.order = append(r.order, "apply")
}

func (r *recSink) Reset(topic string, reason ResetReason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resets = append(r.resets, resetRec{topic, reason})
	r.order = append(r.order, "reset "+reason.String())
}

// lastCalls returns the last n calls, as "apply" or "reset <reason>".
func (r *recSink) lastCalls(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order[max(0, len(r.order)-n):]...)
}

func (r *recSink) snapshot() ([]Batch, []resetRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Batch(nil), r.batches...), append([]resetRec(nil), r.resets...)
}

// saw reports whether a batch with seq on topic was applied.
func (r *recSink) saw(topic string, seq uint64) bool { return r.sawSince(0, topic, seq) }

// applied returns the number of batches applied so far.
func (r *recSink) applied() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.batches)
}

// sawSince is saw among the batches applied after the first n.
func (r *recSink) sawSince(n int, topic string, seq uint64) bool {
	bs, _ := r.snapshot()
	for _, b := range bs[min(n, len(bs)):] {
		if b.Topic == topic && b.Seq == seq {
			return true
		}
	}
	return false
}

// seqsSince returns the applied sequence numbers of topic from seq on.
func (r *recSink) seqsSince(topic string, from uint64) []uint64 {
	bs, _ := r.snapshot()
	var out []uint64
	for _, b := range bs {
		if b.Topic == topic && b.Seq >= from {
			out = append(out, b.Seq)
		}
	}
	return out
}

func (r *recSink) hasReset(topic string, reason ResetReason) bool {
	_, rs := r.snapshot()
	for _, x := range rs {
		if x.topic == topic && x.reason == reason {
			return true
		}
	}
	return false
}

// startSubscriber runs a Subscriber until the test ends.
func startSubscriber(t *testing.T, cfg SubscriberConfig, sink Sink) *Subscriber {
	t.Helper()
	cfg.MinBackoff, cfg.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	s, err := NewSubscriber(cfg, sink, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return s
}

func newTestPublisher(t *testing.T, cfg PublisherConfig) *Publisher {
	t.Helper()
	p, err := NewPublisher(cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

func tcp(a net.Addr) string { return "tcp://" + a.String() }

// syncPublisher publishes heartbeats until the subscriber delivers one (a PUB
// drops messages until the SUB's subscription has reached it) and returns
// that heartbeat's sequence number.
func syncPublisher(t *testing.T, p *Publisher, sink *recSink, topic string) uint64 {
	t.Helper()
	var seq uint64
	before := sink.applied()
	waitFor(t, "publisher and subscriber in sync", func() bool {
		var err error
		seq, err = p.Publish()
		require.NoError(t, err)
		return waitBriefly(func() bool { return sink.sawSince(before, topic, seq) })
	})
	return seq
}

// waitBriefly polls cond for a short while; a false result is not a failure.
func waitBriefly(cond func() bool) bool {
	for i := 0; i < 20; i++ {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// rawPub is a foreign publisher: a plain zmq4 PUB sending frames as given,
// byte for byte, the way vLLM's and SGLang's ZmqEventPublisher do.
type rawPub struct {
	sock zmq4.Socket
	next uint64
}

func newRawPub(t *testing.T) *rawPub {
	t.Helper()
	sock := zmq4.NewPub(context.Background())
	require.NoError(t, sock.Listen("tcp://127.0.0.1:0"))
	t.Cleanup(func() { sock.Close() })
	return &rawPub{sock: sock}
}

func (p *rawPub) endpoint() string { return tcp(p.sock.Addr()) }

func (p *rawPub) sendFrames(t *testing.T, frames ...[]byte) {
	t.Helper()
	require.NoError(t, p.sock.SendMulti(zmq4.NewMsgFrom(frames...)))
}

// send publishes payload on topic with the next sequence number.
func (p *rawPub) send(t *testing.T, topic string, payload []byte) uint64 {
	t.Helper()
	seq := p.next
	p.next++
	p.sendFrames(t, []byte(topic), seqBytes(seq), payload)
	return seq
}

// heartbeat is an empty batch.
var heartbeat = mp("92", tsHex, "90")

// sync sends heartbeats with increasing sequence numbers until one is
// delivered, and returns its sequence number.
func (p *rawPub) sync(t *testing.T, sink *recSink, topic string) uint64 {
	t.Helper()
	var seq uint64
	before := sink.applied()
	waitFor(t, "raw publisher in sync", func() bool {
		seq = p.send(t, topic, heartbeat)
		return waitBriefly(func() bool { return sink.sawSince(before, topic, seq) })
	})
	return seq
}

// connectedPair starts a publisher on a free loopback port (cfg's endpoints
// are set here; with replay, a replay socket too) and a subscriber to it,
// and returns them once the subscriber receives (start: the sequence
// number of the batch that showed it).
func connectedPair(t *testing.T, cfg PublisherConfig, replay bool) (*Publisher, *Subscriber, *recSink, uint64) {
	t.Helper()
	cfg.Endpoint = "tcp://127.0.0.1:0"
	if replay {
		cfg.ReplayEndpoint = "tcp://127.0.0.1:0"
	}
	pub := newTestPublisher(t, cfg)
	scfg := SubscriberConfig{Endpoint: tcp(pub.Addr())}
	if replay {
		scfg.ReplayEndpoint = tcp(pub.ReplayAddr())
	}
	sink := &recSink{}
	sub := startSubscriber(t, scfg, sink)
	return pub, sub, sink, syncPublisher(t, pub, sink, "")
}
