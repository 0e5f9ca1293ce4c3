package kvevents

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A batch its caller lost before Publish (the sim's bounded queue
// overflowing) used to leave no sequence gap, so no subscriber could notice.
// Skip numbers it: the next batch shows a gap that replay cannot fill (the
// skipped number is in no buffer), and the subscriber resets the topic.
func TestPublisherSkipResetsSubscriber(t *testing.T) {
	tests := []struct {
		name     string
		replay   bool
		lostWire bool // a batch lost on the wire (kept for replay) before the skipped one
	}{
		{"no replay endpoint", false, false},
		{"replay cannot fill a skipped number", true, false},
		{"replay fills what it holds, then resets at the skipped number", true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pub, sub, sink, start := connectedPair(t, PublisherConfig{}, tc.replay)

			want := []uint64{start}
			if tc.lostWire {
				want = append(want, mustPublish(t, pub, false))
			}
			skipped, err := pub.Skip()
			require.NoError(t, err)
			require.Equal(t, want[len(want)-1]+1, skipped, "Skip takes the next number")
			last := mustPublish(t, pub, true)
			require.Equal(t, skipped+1, last)
			want = append(want, last)
			waitFor(t, "batch after the skipped number", func() bool { return sink.saw("", last) })

			require.Equal(t, want, sink.seqsSince("", start))
			require.Equal(t, []string{"apply", "reset gap", "apply"}, sink.lastCalls(3))
			st := sub.Stats()
			require.Equal(t, uint64(1), st.Gaps)
			require.Equal(t, uint64(len(want)-2), st.Replayed)
		})
	}
}

func TestPublisherClosedRefusesPublishAndSkip(t *testing.T) {
	pub, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0"}, nil)
	require.NoError(t, err)
	require.NoError(t, pub.Close())
	_, err = pub.Skip()
	require.ErrorIs(t, err, ErrPublisherClosed)
	_, err = pub.Publish(&AllBlocksCleared{})
	require.ErrorIs(t, err, ErrPublisherClosed)
	require.NoError(t, pub.Close(), "idempotent")
}

// zmq4 v0.17.0 leaves its PUB writer goroutine, (*pubMWriter).run, running
// after the socket's Close, and nothing exported stops it (doc.go,
// Concurrency). Every other goroutine of a Publisher, its connections and
// its replay socket ends; the writer is the one allowed leftover.
func TestPublisherCloseLeavesOnlyZmq4Writer(t *testing.T) {
	before := maxGoroutineID(t)
	pub, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"}, nil)
	require.NoError(t, err)
	sink := &recSink{}
	sub, err := NewSubscriber(SubscriberConfig{Endpoint: tcp(pub.Addr()), ReplayEndpoint: tcp(pub.ReplayAddr()),
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}, sink, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	syncPublisher(t, pub, sink, "")
	_, err = pub.Skip() // a gap: the subscriber's replay connection comes and goes too
	require.NoError(t, err)
	last := mustPublish(t, pub, true)
	waitFor(t, "batch after the gap", func() bool { return sink.saw("", last) })
	cancel()
	require.NoError(t, <-done)
	// The subscriber left first; the connection its leaving closed is no
	// error of Close (it used to return "use of closed network connection").
	require.NoError(t, pub.Close())

	var left []string
	waitFor(t, "every goroutine but zmq4's PUB writer to end", func() bool {
		left = goroutinesAfter(t, before)
		return len(left) == 0 || (len(left) == 1 && strings.Contains(left[0], "zmq4.(*pubMWriter).run"))
	})
	require.LessOrEqual(t, len(left), 1, "%s", strings.Join(left, "\n\n"))
}

// goroutineStacks returns the stacks of every goroutine but system ones, by
// goroutine id.
func goroutineStacks(t *testing.T) map[int64]string {
	t.Helper()
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[int64]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
		id, err := strconv.ParseInt(head, 10, 64)
		require.NoError(t, err, "stack header: %q", g)
		out[id] = g
	}
	return out
}

// maxGoroutineID is the highest goroutine id now; ids only grow, so a later
// goroutine with a higher id was started after this call.
func maxGoroutineID(t *testing.T) int64 {
	var top int64
	for id := range goroutineStacks(t) {
		top = max(top, id)
	}
	return top
}

// goroutinesAfter returns the stacks of the ZeroMQ and kvevents goroutines
// started after the one with id after.
func goroutinesAfter(t *testing.T, after int64) []string {
	var out []string
	for id, g := range goroutineStacks(t) {
		if id > after && (strings.Contains(g, "go-zeromq/zmq4") || strings.Contains(g, "proto/kvevents")) {
			out = append(out, g)
		}
	}
	return out
}
