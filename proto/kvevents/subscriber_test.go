package kvevents

import (
	"context"
	"sync"
	"testing"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"
)

// A fake vLLM/SGLang publisher sends byte-exact frames; the subscriber (in
// connect mode, as against an engine that binds tcp://*:5557) must deliver
// each decoded batch with its topic and sequence number.
func TestSubscriberDecodesEngineFrames(t *testing.T) {
	pub := newRawPub(t)
	sink := &recSink{}
	const topic = "kv@pod-a@llama"
	startSubscriber(t, SubscriberConfig{Endpoint: pub.endpoint(), Topic: "kv@"}, sink)
	pub.sync(t, sink, topic)

	for _, payload := range [][]byte{vllmMapIntHashes, vllmArrayBytesHashes, vllmMapRemovedCleared} {
		want, err := DecodeBatch(payload)
		require.NoError(t, err)
		want.Topic, want.Seq = topic, pub.send(t, topic, payload)
		waitFor(t, "batch delivered", func() bool { return sink.saw(topic, want.Seq) })
		bs, rs := sink.snapshot()
		assertBatch(t, want, bs[len(bs)-1])
		require.Empty(t, rs)
	}
	pub.sendFrames(t, []byte("other-topic"), seqBytes(0), vllmMapIntHashes) // filtered by the subscription
	seq := pub.send(t, topic, vllmMapRemovedCleared)
	waitFor(t, "last batch", func() bool { return sink.saw(topic, seq) })
	bs, _ := sink.snapshot()
	for _, b := range bs {
		require.Equal(t, topic, b.Topic)
	}
}

// Bind mode: the subscriber listens and publishers connect to it (vLLM with a
// non-wildcard endpoint; llm-d's centralized mode). Two publishers on distinct
// topics are tracked separately.
func TestSubscriberBindMode(t *testing.T) {
	sink := &recSink{}
	sub := startSubscriber(t, SubscriberConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true}, sink)
	waitFor(t, "subscriber listening", func() bool { return sub.Addr() != nil })

	pubA := newTestPublisher(t, PublisherConfig{Endpoint: tcp(sub.Addr()), Connect: true, Topic: "kv@a"})
	pubB := newTestPublisher(t, PublisherConfig{Endpoint: tcp(sub.Addr()), Connect: true, Topic: "kv@b"})
	syncPublisher(t, pubA, sink, "kv@a")
	syncPublisher(t, pubB, sink, "kv@b")
	var lastA, lastB uint64
	for i := 0; i < 5; i++ {
		var err error
		lastA, err = pubA.Publish(&AllBlocksCleared{})
		require.NoError(t, err)
		lastB, err = pubB.Publish(&BlockRemoved{BlockHashes: []BlockHash{HashFromUint64(uint64(i))}})
		require.NoError(t, err)
	}
	waitFor(t, "both streams delivered", func() bool {
		return sink.saw("kv@a", lastA) && sink.saw("kv@b", lastB)
	})
	_, rs := sink.snapshot()
	require.Empty(t, rs, "interleaved publishers must not look like gaps")
	require.True(t, sub.Stats().Connected)
}

// A publisher that restarts starts its sequence again at 0: the subscriber
// reconnects, sees the sequence go backwards and resets.
func TestSubscriberPublisherRestart(t *testing.T) {
	first, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0"}, nil)
	require.NoError(t, err)
	ep := tcp(first.Addr())
	sink := &recSink{}
	sub := startSubscriber(t, SubscriberConfig{Endpoint: ep}, sink)
	syncPublisher(t, first, sink, "")
	var last uint64
	for i := 0; i < 1000; i++ {
		last, err = first.Publish(&AllBlocksCleared{})
		require.NoError(t, err)
	}
	waitFor(t, "first publisher's batches", func() bool { return sink.saw("", last) })
	require.NoError(t, first.Close())

	second := newTestPublisher(t, PublisherConfig{Endpoint: ep})
	seq := syncPublisher(t, second, sink, "")
	require.Less(t, seq, last)
	require.True(t, sink.hasReset("", ResetRestart))
	require.Equal(t, uint64(1), sub.Stats().Resets)
}

// A lost batch is recovered from the replay endpoint, in order, without a
// reset.
func TestSubscriberGapFilledByReplay(t *testing.T) {
	pub := newTestPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "t"})
	sink := &recSink{}
	sub := startSubscriber(t, SubscriberConfig{Endpoint: tcp(pub.Addr()), ReplayEndpoint: tcp(pub.ReplayAddr()), Topic: "t"}, sink)
	start := syncPublisher(t, pub, sink, "t")

	mustPublish(t, pub, true)
	mustPublish(t, pub, false) // lost on the wire, kept in the replay buffer
	mustPublish(t, pub, false)
	last := mustPublish(t, pub, true)
	waitFor(t, "batches after the gap", func() bool { return sink.saw("t", last) })

	require.Equal(t, []uint64{start, start + 1, start + 2, start + 3, start + 4}, sink.seqsSince("t", start))
	_, rs := sink.snapshot()
	require.Empty(t, rs)
	st := sub.Stats()
	require.Equal(t, uint64(1), st.Gaps)
	require.Equal(t, uint64(2), st.Replayed)
}

// A gap replay cannot fill resets: without a replay endpoint, and when the
// replay buffer no longer holds the batches.
func TestSubscriberGapNotFillable(t *testing.T) {
	tests := []struct {
		name   string
		replay bool
		buffer int
	}{
		{"no replay endpoint", false, 0},
		{"replay buffer too short", true, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pub, sub, sink, start := connectedPair(t, PublisherConfig{BufferSteps: tc.buffer}, tc.replay)
			for i := 0; i < 3; i++ {
				mustPublish(t, pub, false)
			}
			last := mustPublish(t, pub, true)
			waitFor(t, "batch after the gap", func() bool { return sink.saw("", last) })

			require.Equal(t, []uint64{start, last}, sink.seqsSince("", start))
			require.Equal(t, []string{"apply", "reset gap", "apply"}, sink.lastCalls(3))
			require.Equal(t, uint64(0), sub.Stats().Replayed)
		})
	}
}

// SGLang's replay replies carry no topic frame ("", seq, payload) and end with
// ("", -1, ""); a fake SGLang replay ROUTER fills a gap.
func TestSubscriberSGLangReplayFormat(t *testing.T) {
	pub := newRawPub(t)
	router := zmq4.NewRouter(context.Background())
	require.NoError(t, router.Listen("tcp://127.0.0.1:0"))
	t.Cleanup(func() { router.Close() })
	var mu sync.Mutex
	payloads := map[uint64][]byte{} // guarded by mu: what the fake's buffer holds
	go func() {                     // answers until the router is closed
		for {
			msg, err := router.Recv()
			if err != nil {
				return
			}
			if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 || len(msg.Frames[2]) != 8 {
				continue // _service_replay ignores invalid requests
			}
			id, start := msg.Frames[0], uint64FromFrame(msg.Frames[2])
			for seq := start; ; seq++ {
				mu.Lock()
				p, ok := payloads[seq]
				mu.Unlock()
				if !ok {
					break
				}
				_ = router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, seqBytes(seq), p))
			}
			_ = router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, seqBytes(endSeq), []byte{}))
		}
	}()
	sink := &recSink{}
	startSubscriber(t, SubscriberConfig{Endpoint: pub.endpoint(), ReplayEndpoint: tcp(router.Addr())}, sink)
	synced := pub.sync(t, sink, "")
	mu.Lock()
	payloads[synced] = heartbeat
	payloads[synced+1] = vllmMapIntHashes
	payloads[synced+2] = vllmMapRemovedCleared
	mu.Unlock()
	pub.next = synced + 3 // synced+1 and synced+2 are lost on the wire
	last := pub.send(t, "", heartbeat)
	waitFor(t, "live batch after the gap", func() bool { return sink.saw("", last) })
	require.Equal(t, []uint64{synced, synced + 1, synced + 2, synced + 3}, sink.seqsSince("", synced))
	_, rs := sink.snapshot()
	require.Empty(t, rs)
}

// A malformed frame or payload is counted and resets the topic; the stream
// goes on.
func TestSubscriberMalformed(t *testing.T) {
	pub := newRawPub(t)
	sink := &recSink{}
	sub := startSubscriber(t, SubscriberConfig{Endpoint: pub.endpoint()}, sink)
	pub.sync(t, sink, "")

	pub.send(t, "", []byte{0xc1, 0x00})      // not msgpack
	pub.sendFrames(t, []byte(""), []byte{1}) // two frames, short sequence
	seq := pub.send(t, "", vllmMapRemovedCleared)
	waitFor(t, "batch after the malformed ones", func() bool { return sink.saw("", seq) })

	require.Equal(t, uint64(2), sub.Stats().Malformed)
	_, rs := sink.snapshot()
	require.Equal(t, []resetRec{{"", ResetMalformed}, {"", ResetMalformed}}, rs)
}

// A Sink that stops consuming must not stall the reader or grow memory: the
// queue overflows, is discarded, and the topic resets; delivery resumes once
// the Sink does.
func TestSubscriberSlowSink(t *testing.T) {
	pub := newTestPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0"})
	sink := &recSink{}
	sub := startSubscriber(t, SubscriberConfig{Endpoint: tcp(pub.Addr()), QueueSize: 4}, sink)
	syncPublisher(t, pub, sink, "")

	gate := make(chan struct{})
	sink.mu.Lock()
	sink.gate = gate
	sink.mu.Unlock()
	var last uint64
	for i := 0; i < 200; i++ {
		last = mustPublish(t, pub, true)
	}
	waitFor(t, "reader past every batch while the sink is stuck", func() bool { return sub.Stats().LastSeq == last })
	require.LessOrEqual(t, len(sub.queue), 4, "queue bounded")
	require.Positive(t, sub.Stats().Dropped)
	close(gate)

	final := mustPublish(t, pub, true)
	waitFor(t, "delivery resumed", func() bool { return sink.saw("", final) })
	require.True(t, sink.hasReset("", ResetOverflow))
}

func mustPublish(t *testing.T, p *Publisher, live bool) uint64 {
	t.Helper()
	seq, err := p.publish([]Event{&AllBlocksCleared{}}, live)
	require.NoError(t, err)
	return seq
}
