package sim

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/duet-serve/duet/proto/openai"
	"github.com/duet-serve/duet/tokenizer"
)

// Ways a decode ends early.
var (
	errAborted = errors.New("worker is shutting down")
	errDied    = errors.New("injected fault: worker died mid-stream")
	errBroken  = errors.New("injected fault: connection cut or stalled mid-stream")
)

// tokenSink receives a sequence's output as the decode loop produces it.
type tokenSink interface {
	// piece takes the visible text of one token; text is "" while a stop
	// string may be forming. whole is true when text is exactly token id's
	// text (so a pre-encoded form may be used). An error ends the decode
	// (the client is gone).
	piece(id int, text string, whole bool) error
	// flush is called before the loop sleeps until the next token is due.
	flush() error
}

// decodeResult is how a sequence ended.
type decodeResult struct {
	tokens []int  // generated token ids, EOS excluded
	finish string // openai.FinishStop or openai.FinishLength
}

// decode waits for the first token, then produces tokens until EOS, a stop
// string, the length limit, a fault or an abort. With paced, tokens are
// handed to sink when due (deadline schedule, one flush per batch); without,
// all are produced at once and decode sleeps once until the last is due.
func (s *Server) decode(r *run, sink tokenSink, paced bool) (decodeResult, error) {
	j := r.j
	res := decodeResult{tokens: make([]int, 0, min(j.limit, 1024))}
	if !s.clock.sleepUntil(s.abortCtx, r.firstAt) {
		return res, errAborted
	}
	if r.fault.kvPullFail { // the transfer failed: no KV, no token
		s.metrics.faults[faultKVPullFail].Add(1)
		return res, errKVPullFailed
	}
	r.ready = true
	if j.phase == phaseGeneration {
		r.lease.commit(j.promptBlocks()) // the pulled prompt KV is now held here
	}
	sched := decodeSchedule{next: r.firstAt}
	lastDue := r.firstAt
	st := newStopper(j.stop, j.minTokens)
	for {
		if r.fault.die && len(res.tokens) >= r.fault.dieAfter {
			s.metrics.faults[faultDie].Add(1)
			return res, errDied
		}
		if (r.fault.cut || r.fault.stall) && len(res.tokens) >= r.fault.dieAfter {
			return res, errBroken // the caller breaks the connection
		}
		if r.fault.errorEvent && len(res.tokens) >= r.fault.dieAfter {
			s.metrics.faults[faultErrorEvent].Add(1)
			if err := s.finishDecode(paced, lastDue); err != nil {
				return res, err
			}
			return res, errEngineFailed // the caller reports it the engine's way
		}
		if paced && !sched.due(s.clock.now()) {
			if err := sink.flush(); err != nil {
				return res, err
			}
			if !s.clock.sleepUntil(s.abortCtx, sched.next) {
				return res, errAborted
			}
		}
		lastDue = sched.next
		id, eos := r.nextToken()
		if eos {
			res.finish = openai.FinishStop
			break
		}
		res.tokens = append(res.tokens, id)
		text := s.vocab.text(id)
		emit, stopped := st.add(text, len(res.tokens))
		if err := sink.piece(id, emit, emit == text); err != nil {
			return res, err
		}
		if stopped {
			res.finish = openai.FinishStop
			return res, s.finishDecode(paced, lastDue)
		}
		if len(res.tokens) >= j.limit {
			res.finish = openai.FinishLength
			break
		}
		sched.advance(s.model.ITL(int(s.sched.running.Load()), r.fault.slow))
	}
	// EOS or length: text held back for a stop string that never came.
	if rest := st.rest(); rest != "" {
		if err := sink.piece(-1, rest, false); err != nil {
			return res, err
		}
	}
	return res, s.finishDecode(paced, lastDue)
}

// finishDecode makes an unpaced decode last until its last token was due.
func (s *Server) finishDecode(paced bool, lastDue time.Time) error {
	if !paced && !s.clock.sleepUntil(s.abortCtx, lastDue) {
		return errAborted
	}
	return nil
}

// extendHashes returns prev extended by the full blocks of tokens (prev
// must be seqHashes of a prefix of tokens with the same adapter); prev
// itself is not modified. With prev empty (a prompt shorter than one block)
// the chain starts from the adapter's salt, as seqHashes does: extending
// an empty chain would start it unsalted and give an adapter's output
// blocks the base model's hashes.
func extendHashes(prev []uint64, tokens []int, blockSize int, adapter string) []uint64 {
	if len(prev) == 0 {
		return seqHashes(tokens, blockSize, adapter)
	}
	return tokenizer.ExtendBlockHashes(slices.Clip(prev), tokens, blockSize)
}

// textSink collects the text of a non-streaming response.
type textSink struct{ b strings.Builder }

func (t *textSink) piece(_ int, text string, _ bool) error {
	t.b.WriteString(text)
	return nil
}

func (t *textSink) flush() error { return nil }
