package sim

import (
	"context"
	"errors"
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
	alloc   *kvAlloc
	expires time.Time
	info    pinInfo
}

// pinInfo describes the pinned prompt; a pull checks it against the
// generation request's prompt.
type pinInfo struct {
	PromptTokens int     `json:"prompt_tokens"`
	BlockSize    int     `json:"block_size"`
	LastHash     uint64  `json:"last_block_hash"` // hash of the last full prompt block, 0 when none
	BlockIDs     []int32 `json:"block_ids"`
}

// pin ends the running sequence but keeps its blocks referenced under key
// until expires; hashes (the prompt's full blocks) are registered first. It
// returns the pinned block ids, or false when the lease had already ended or
// key is taken.
func (l *lease) pin(key string, expires time.Time, info pinInfo, hashes []uint64) ([]int32, bool) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.ended {
		return nil, false
	}
	if _, taken := s.pins[key]; taken {
		return nil, false
	}
	l.ended = true
	s.kv.commit(l.alloc, hashes)
	info.BlockIDs = append([]int32(nil), l.alloc.blocks...)
	s.pins[key] = &pin{alloc: l.alloc, expires: expires, info: info}
	s.running.Add(-1)
	s.dispatchLocked()
	return info.BlockIDs, true
}

// takePin consumes the pin under key: check (may be nil) vets the pin's
// prompt first, and a pin that fails it is left in place. A consumed or
// expired pin's blocks stay in the cache, unreferenced.
func (s *scheduler) takePin(key string, now time.Time, check func(pinInfo) error) (pinInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	s.dropPinLocked(key, p)
	return p.info, nil
}

// expirePins drops pins that expired before now and returns how many.
func (s *scheduler) expirePins(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	defer s.mu.Unlock()
	n := len(s.pins)
	for key, p := range s.pins {
		s.dropPinLocked(key, p)
	}
	return n
}

func (s *scheduler) dropPinLocked(key string, p *pin) {
	delete(s.pins, key)
	s.kv.release(p.alloc)
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
