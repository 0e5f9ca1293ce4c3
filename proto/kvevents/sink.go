package kvevents

// Sink receives one subscriber's batches. A Subscriber calls it from a single
// goroutine, so calls never overlap; they are made in the order the batches of
// each topic were published. A Sink that blocks delays only that goroutine:
// the network reader keeps reading, and once the queue between them is full
// it discards the queue and resets the topics whose batches it dropped.
type Sink interface {
	// Apply delivers a batch. Batches of one topic arrive in sequence order
	// with none missing since that topic's last Reset. The batch is the Sink's
	// to keep.
	Apply(b Batch)
	// Reset says batches of topic were lost: everything the Sink learned from
	// that topic's publisher is void, and it should start again from empty
	// with the next Apply.
	Reset(topic string, reason ResetReason)
}

// ResetReason says why a Subscriber reset a topic.
type ResetReason int

const (
	// ResetGap: sequence numbers skipped and replay could not fill the gap
	// (no replay endpoint, buffer too short, timeout, different publisher).
	ResetGap ResetReason = iota + 1
	// ResetRestart: the sequence went backwards; the publisher restarted.
	ResetRestart
	// ResetMalformed: a frame or payload could not be decoded.
	ResetMalformed
	// ResetOverflow: the Sink fell behind and queued batches were dropped.
	ResetOverflow
)

// String names the reason for logs and metrics.
func (r ResetReason) String() string {
	switch r {
	case ResetGap:
		return "gap"
	case ResetRestart:
		return "restart"
	case ResetMalformed:
		return "malformed"
	case ResetOverflow:
		return "overflow"
	default:
		return "unknown"
	}
}

// seqVerdict is what a sequence number means for a stream.
type seqVerdict int

const (
	seqFirst   seqVerdict = iota // first batch of the stream (or after a reset without a sequence)
	seqNext                      // the expected next one
	seqGap                       // later than expected: batches were missed
	seqRestart                   // not after the last one: a new publisher
)

// stream is the sequence state of one topic. Owned by the reader goroutine.
type stream struct {
	started  bool
	last     uint64 // last sequence number delivered (or skipped as malformed)
	lastHash uint64 // xxhash64 of that batch's payload, to recognise it in a replay
}

// classify says what seq means after the stream's last batch.
func (s *stream) classify(seq uint64) seqVerdict {
	switch {
	case !s.started:
		return seqFirst
	case seq == s.last+1:
		return seqNext
	case seq > s.last:
		return seqGap
	default:
		return seqRestart
	}
}

// advance records seq as the stream's last batch.
func (s *stream) advance(seq, payloadHash uint64) {
	s.started, s.last, s.lastHash = true, seq, payloadHash
}
