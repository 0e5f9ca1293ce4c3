package kvevents

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStreamClassify(t *testing.T) {
	tests := []struct {
		name string
		st   stream
		seq  uint64
		want seqVerdict
	}{
		{"first batch ever", stream{}, 42, seqFirst},
		{"next", stream{started: true, last: 4}, 5, seqNext},
		{"gap", stream{started: true, last: 4}, 9, seqGap},
		{"repeat means a new publisher", stream{started: true, last: 4}, 4, seqRestart},
		{"backwards", stream{started: true, last: 4}, 0, seqRestart},
		{"TensorRT-LLM epoch jump is a gap", stream{started: true, last: 4}, 1_764_000_000_000_000_000, seqGap},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.st.classify(tc.seq))
		})
	}
}

func TestParseFrames(t *testing.T) {
	seq7 := seqBytes(7)
	live, err := parseLive([][]byte{[]byte("kv@p@m"), seq7, {0x90}})
	require.NoError(t, err)
	require.Equal(t, liveFrame{topic: "kv@p@m", seq: 7, payload: []byte{0x90}}, live)
	_, err = parseLive([][]byte{[]byte("t"), {1, 2}, {0x90}})
	require.ErrorIs(t, err, errFrame)

	replays := []struct {
		name   string
		frames [][]byte
		want   replayReply
	}{
		{"vLLM with topic via DEALER", [][]byte{{}, []byte("t"), seq7, {0x90}}, replayReply{seq: 7, payload: []byte{0x90}}},
		{"vLLM end marker", [][]byte{{}, {}, seqBytes(endSeq), {}}, replayReply{seq: endSeq, payload: []byte{}, end: true}},
		{"SGLang via DEALER", [][]byte{{}, seq7, {0x90}}, replayReply{seq: 7, payload: []byte{0x90}}},
		{"SGLang end marker", [][]byte{{}, seqBytes(endSeq), {}}, replayReply{seq: endSeq, payload: []byte{}, end: true}},
		{"vLLM via REQ", [][]byte{[]byte("t"), seq7, {0x90}}, replayReply{seq: 7, payload: []byte{0x90}}},
		{"SGLang via REQ", [][]byte{seq7, {0x90}}, replayReply{seq: 7, payload: []byte{0x90}}},
	}
	for _, tc := range replays {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseReplay(tc.frames)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err = parseReplay([][]byte{{}, {}, {}, {}, {}})
	require.ErrorIs(t, err, errFrame)
	require.Equal(t, [][]byte{{}, seq7}, replayRequest(7))
}

// The bounded transport fails a read that starts an oversized message, which
// zmq4 would otherwise allocate in full.
func TestBoundedConnScan(t *testing.T) {
	greeting := bytes.Repeat([]byte{0}, zmtpGreeting)
	long := func(flags byte, size uint64) []byte {
		return binary.BigEndian.AppendUint64([]byte{flags | 0x02}, size)
	}
	tests := []struct {
		name    string
		stream  []byte
		wantErr bool
	}{
		{"short frames", append(append(append([]byte{}, greeting...), 0x00, 3, 'a', 'b', 'c'), 0x04, 1, 'x'), false},
		{"long frame at the limit", append(append([]byte{}, greeting...), long(0, maxMessageBytes)...), false},
		{"long frame over the limit", append(append([]byte{}, greeting...), long(0, 1<<40)...), true},
		{"multipart over the limit", append(append(append([]byte{}, greeting...), 0x01, 2, 'a', 'b'),
			long(0, maxMessageBytes-1)...), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &boundedConn{}
			var err error
			for i := 0; i < len(tc.stream) && err == nil; i += 5 { // arbitrary read boundaries
				err = c.scan(tc.stream[i:min(i+5, len(tc.stream))])
			}
			require.Equal(t, tc.wantErr, err != nil, "err = %v", err)
		})
	}
}

func TestSubscriberConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  SubscriberConfig
		want string
	}{
		{"ok", SubscriberConfig{Endpoint: "tcp://127.0.0.1:5557"}, ""},
		{"no endpoint", SubscriberConfig{}, "kvevents.endpoint: required"},
		{"bad scheme", SubscriberConfig{Endpoint: "http://x"}, "kvevents.endpoint"},
		{"replay when binding", SubscriberConfig{Endpoint: "tcp://*:5557", Bind: true, ReplayEndpoint: "tcp://h:5558"},
			"kvevents.replay_endpoint"},
		{"negative queue", SubscriberConfig{Endpoint: "tcp://h:1", QueueSize: -1}, "kvevents.queue_size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Defaults().Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestBlockHash(t *testing.T) {
	require.Equal(t, HashFromInt64(-1), HashFromUint64(1<<64-1))
	require.NotEqual(t, HashFromUint64(1), HashFromBytes([]byte{1}))
	b, ok := HashFromBytes([]byte{0xab, 0xcd}).Bytes()
	require.True(t, ok)
	require.Equal(t, []byte{0xab, 0xcd}, b)
	require.Equal(t, "0xabcd", HashFromBytes([]byte{0xab, 0xcd}).String())
	require.Equal(t, "7", HashFromUint64(7).String())
	m := map[BlockHash]int{HashFromBytes([]byte("x")): 1}
	require.Equal(t, 1, m[HashFromBytes([]byte("x"))])
}
