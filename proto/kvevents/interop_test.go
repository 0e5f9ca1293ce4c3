package kvevents

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// interopPublisher mimics vLLM's ZmqEventPublisher on real libzmq (pyzmq) and
// msgpack-python (whose bytes match msgspec's for these types): PUB bound,
// ROUTER replay answering (topic, seq, payload) and the end marker. It sends
// heartbeats until told "go" on stdin, then batches k+1 live, k+2 only into
// the replay buffer, k+3 live; it exits on "quit".
const interopPublisher = `
import sys, threading, time, msgpack, zmq
pub_ep, replay_ep, topic = sys.argv[1], sys.argv[2], sys.argv[3].encode()
ctx = zmq.Context.instance()
pub = ctx.socket(zmq.PUB); pub.bind(pub_ep)
rep = ctx.socket(zmq.ROUTER); rep.bind(replay_ep)
buf, seq, go, quit = [], 0, threading.Event(), threading.Event()
def stdin():
    for line in sys.stdin:
        (go if line.strip() == "go" else quit).set()
threading.Thread(target=stdin, daemon=True).start()
def publish(events, live=True):
    global seq
    payload = msgpack.packb([time.time(), events, 0], use_bin_type=True)
    if live:
        pub.send_multipart((topic, seq.to_bytes(8, "big"), payload))
    buf.append((seq, payload)); seq += 1
def serve():
    while rep.poll(0):
        cid, _, start = rep.recv_multipart()
        for s, p in buf:
            if s >= int.from_bytes(start, "big"):
                rep.send_multipart((cid, b"", topic, s.to_bytes(8, "big"), p))
        rep.send_multipart((cid, b"", b"", (-1).to_bytes(8, "big", signed=True), b""))
while not go.is_set():
    publish([]); serve(); time.sleep(0.02)
stored = {"type": "BlockStored", "block_hashes": [b"\xab" * 32], "parent_block_hash": None, "token_ids": [1, 2],
          "block_size": 2, "lora_id": None, "medium": "GPU", "lora_name": None}
publish([stored]); publish([{"type": "BlockRemoved", "block_hashes": [b"\xab" * 32], "medium": "GPU"}], live=False)
publish([{"type": "AllBlocksCleared"}])
while not quit.is_set():
    serve(); time.sleep(0.005)
`

// TestInteropLibzmq runs against real libzmq when KVEVENTS_INTEROP_PYTHON
// names a Python with pyzmq and msgpack (Debian: python3-zmq python3-msgpack).
func TestInteropLibzmq(t *testing.T) {
	python := os.Getenv("KVEVENTS_INTEROP_PYTHON")
	if python == "" {
		t.Skip("set KVEVENTS_INTEROP_PYTHON to a python3 with pyzmq and msgpack")
	}
	pubEP, replayEP := freeTCP(t), freeTCP(t)
	cmd := exec.Command(python, "-c", interopPublisher, pubEP, replayEP, "kv@pod@model")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	defer func() {
		fmt.Fprintln(stdin, "quit")
		stdin.Close()
		_ = cmd.Wait()
	}()
	w := bufio.NewWriter(stdin)

	sink := &recSink{}
	sub := startSubscriber(t, SubscriberConfig{Endpoint: pubEP, ReplayEndpoint: replayEP, Topic: "kv@"}, sink)
	waitFor(t, "a heartbeat from libzmq", func() bool { return sink.applied() > 0 })
	fmt.Fprintln(w, "go")
	require.NoError(t, w.Flush())
	waitFor(t, "the cleared batch", func() bool {
		bs, _ := sink.snapshot()
		last := bs[len(bs)-1]
		return len(last.Events) == 1 && fmt.Sprintf("%T", last.Events[0]) == "*kvevents.AllBlocksCleared"
	})
	bs, rs := sink.snapshot()
	require.Empty(t, rs)
	n := len(bs)
	require.IsType(t, &BlockStored{}, bs[n-3].Events[0])
	require.IsType(t, &BlockRemoved{}, bs[n-2].Events[0])
	require.Equal(t, "kv@pod@model", bs[n-1].Topic)
	require.Equal(t, uint64(1), sub.Stats().Replayed)
}

// freeTCP returns a loopback endpoint whose port was free a moment ago.
func freeTCP(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return "tcp://" + l.Addr().String()
}
