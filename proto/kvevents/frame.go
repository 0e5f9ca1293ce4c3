package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// endSeq is the replay end marker: -1 as an 8-byte big-endian signed integer
// (ZmqEventPublisher.END_SEQ).
const endSeq = ^uint64(0)

// seqBytes encodes a sequence number as its 8-byte big-endian frame.
func seqBytes(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq)
}

// uint64FromFrame reads an 8-byte big-endian frame.
func uint64FromFrame(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// liveFrame is one PUB message: (topic, seq, payload).
type liveFrame struct {
	topic   string
	seq     uint64
	payload []byte
}

// errFrame is wrapped by frame-layout errors.
var errFrame = errors.New("kvevents: malformed frame")

// parseLive parses a PUB message. vLLM and SGLang send exactly three frames:
// topic, 8-byte big-endian sequence, payload.
func parseLive(frames [][]byte) (liveFrame, error) {
	if len(frames) != 3 {
		return liveFrame{}, fmt.Errorf("%w: %d frames, want 3 (topic, seq, payload)", errFrame, len(frames))
	}
	if len(frames[1]) != 8 {
		return liveFrame{}, fmt.Errorf("%w: sequence frame of %d bytes, want 8", errFrame, len(frames[1]))
	}
	return liveFrame{topic: string(frames[0]), seq: binary.BigEndian.Uint64(frames[1]), payload: frames[2]}, nil
}

// replayRequest is what a DEALER sends to ask for batches from start on: an
// empty delimiter then the 8-byte big-endian start (the publisher's ROUTER sees
// [identity, "", start], the three frames _service_replay requires).
func replayRequest(start uint64) [][]byte {
	return [][]byte{{}, seqBytes(start)}
}

// replayReply is one reply as a DEALER receives it; end marks the end marker.
type replayReply struct {
	seq     uint64
	payload []byte
	end     bool
}

// parseReplay parses a reply after the ROUTER stripped the identity. Two
// layouts exist:
//   - vLLM (newer, and a newer TensorRT-LLM publisher): "", topic, seq, payload;
//     end marker "", "", -1, "".
//   - SGLang and vLLM before the topic was added: "", seq, payload; end
//     marker "", -1, "".
//
// The leading empty delimiter is optional (a REQ socket strips it).
func parseReplay(frames [][]byte) (replayReply, error) {
	if len(frames) > 0 && len(frames[0]) == 0 && (len(frames) == 3 || len(frames) == 4) {
		frames = frames[1:]
	}
	var seq, payload []byte
	switch len(frames) {
	case 2:
		seq, payload = frames[0], frames[1]
	case 3:
		seq, payload = frames[1], frames[2]
	default:
		return replayReply{}, fmt.Errorf("%w: replay reply of %d frames", errFrame, len(frames))
	}
	if len(seq) != 8 {
		return replayReply{}, fmt.Errorf("%w: replay sequence frame of %d bytes, want 8", errFrame, len(seq))
	}
	s := binary.BigEndian.Uint64(seq)
	return replayReply{seq: s, payload: payload, end: s == endSeq}, nil
}
