package sim

import (
	"context"
	"errors"
	"github.com/duet-serve/duet/workers/sim/model"
	"time"

	"go.uber.org/zap"
)

// Pull errors, as the context side reports them.
var (
	errHandleUnknown  = errors.New("unknown KV handle (never issued or already pulled)")
	errHandleExpired  = errors.New("KV handle expired")
	errHandleMismatch = errors.New("KV handle does not match the request's prompt")
)

// pin keeps a context-only request's prompt blocks referenced until a
// generation worker pulls them or the handle expires.
type pin struct {
	alloc   *model.KVAlloc
	expires time.Time
	info    pinInfo
	watch   *pinWatch // nil unless the pinner waits for the pin's end
}

// pinWatch tells a pinner how its pin ended: done is closed when the pin is
// taken or dropped (expired, or at shutdown); taken is set, under
// scheduler.mu, before done is closed, so it may be read after <-done.
type pinWatch struct {
	done  chan struct{}
	taken bool
}

func newPinWatch() *pinWatch { return &pinWatch{done: make(chan struct{})} }

// pinInfo describes the pinned prompt; a pull checks it against the
// generation request's prompt.
type pinInfo struct {
	PromptTokens int     `json:"prompt_tokens"`
	BlockSize    int     `json:"block_size"`
	LastHash     uint64  `json:"last_block_hash"` // hash of the last full prompt block, 0 when none
	BlockIDs     []int32 `json:"block_ids"`
}

// pin ends the running sequence but keeps its blocks referenced under key
// until expires; b (the prompt's full blocks) is registered first. It
// returns the pinned block ids, or false when the lease had already ended or
// key is taken.
func (l *lease) pin(key string, expires time.Time, info pinInfo, b seqBlocks) ([]int32, bool) {
	return l.pinWatched(key, expires, info, b, nil)
}

// pinWatched is pin that also reports the pin's end through watch (may be
// nil). It wakes the waiters of takePinWait.
func (l *lease) pinWatched(key string, expires time.Time, info pinInfo, b seqBlocks, watch *pinWatch) ([]int32, bool) {
	s := l.s
	s.mu.Lock()
	defer s.unlock()
	if l.ended {
		return nil, false
	}
	if _, taken := s.pins[key]; taken {
		return nil, false
	}
	l.ended = true
	s.kv.CommitLoRA(l.alloc, b.hashes, b.tokens, b.adapter)
	info.BlockIDs = l.alloc.BlockIDs()
	s.pins[key] = &pin{alloc: l.alloc, expires: expires, info: info, watch: watch}
	if s.pinAdded != nil {
		close(s.pinAdded)
		s.pinAdded = nil
	}
	s.running.Add(-1)
	s.dispatchLocked()
	return info.BlockIDs, true
}

// takePin consumes the pin under key: check (may be nil) vets the pin's
// prompt first, and a pin that fails it is left in place. A consumed or
// expired pin's blocks stay in the cache, unreferenced.
func (s *scheduler) takePin(key string, now time.Time, check func(pinInfo) error) (pinInfo, error) {
	s.mu.Lock()
	defer s.unlock()
	return s.takePinLocked(key, now, check)
}

func (s *scheduler) takePinLocked(key string, now time.Time, check func(pinInfo) error) (pinInfo, error) {
	p, ok := s.pins[key]
	if !ok {
		return pinInfo{}, errHandleUnknown
	}
	if now.After(p.expires) {
		s.dropPinLocked(key, p)
		return pinInfo{}, errHandleExpired
	}
	if check != nil {
		if err := check(p.info); err != nil {
			return pinInfo{}, err
		}
	}
	if p.watch != nil {
		p.watch.taken = true
	}
	s.dropPinLocked(key, p)
	return p.info, nil
}

// expirePins drops pins that expired before now and returns how many.
func (s *scheduler) expirePins(now time.Time) int {
	s.mu.Lock()
	defer s.unlock()
	n := 0
	for key, p := range s.pins {
		if now.After(p.expires) {
			s.dropPinLocked(key, p)
			n++
		}
	}
	return n
}

// dropAllPins releases every pin (at shutdown) and returns how many.
func (s *scheduler) dropAllPins() int {
	s.mu.Lock()
	defer s.unlock()
	n := len(s.pins)
	for key, p := range s.pins {
		s.dropPinLocked(key, p)
	}
	return n
}

func (s *scheduler) dropPinLocked(key string, p *pin) {
	delete(s.pins, key)
	if p.watch != nil {
		close(p.watch.done)
	}
	s.kv.Release(p.alloc)
	s.dispatchLocked()
}

// expiryLoop drops expired pins every interval until ctx is done. One
// iteration is expirePins, which tests call directly.
func (srv *Server) expiryLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := srv.sched.expirePins(srv.clock.now()); n > 0 {
				srv.metrics.pinsExpired.Add(uint64(n))
				srv.log.Debug("kv handles expired", zap.Int("count", n))
			}
		}
	}
}
