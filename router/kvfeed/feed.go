// Package kvfeed feeds the router's cache index (router/kvindex) with the
// KV cache events of the workers that publish them (proto/kvevents): one
// subscriber per worker incarnation, started and stopped as the pool's
// membership changes.
//
// Concurrency: Feed.Run owns every subscriber goroutine and joins them
// when its context ends; Sync may be called from any goroutine (the pool
// calls it on membership changes). Each subscriber delivers to its sink
// from one goroutine; the sink writes to the worker's kvindex.Cache, which
// is safe for concurrent use.
package kvfeed

import (
	"context"
	"sync"

	"go.uber.org/zap"

	"github.com/duet-serve/duet/proto/kvevents"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/router/kvindex"
	"github.com/duet-serve/duet/tokenizer"
)

// Feed keeps one KV event subscriber per endpoint that publishes events.
type Feed struct {
	rt  *router.Router
	log *zap.Logger

	// mu guards ctx, subs and stopped; wg counts the subscriber goroutines.
	mu      sync.Mutex
	ctx     context.Context // nil until Run
	subs    map[*router.Endpoint]*subscription
	stopped bool
	wg      sync.WaitGroup
}

// subscription is one running subscriber.
type subscription struct {
	sub    *kvevents.Subscriber
	cancel context.CancelFunc
}

// New returns a feed for rt's pool; log may be nil.
func New(rt *router.Router, log *zap.Logger) *Feed {
	if log == nil {
		log = zap.NewNop()
	}
	return &Feed{rt: rt, log: log, subs: map[*router.Endpoint]*subscription{}}
}

// Run subscribes to the workers that publish events, follows membership
// changes, and returns once ctx ends and every subscriber has stopped.
func (f *Feed) Run(ctx context.Context) {
	f.mu.Lock()
	f.ctx = ctx
	f.mu.Unlock()
	f.rt.Pool().OnMembershipChange(f.Sync)
	f.Sync()
	<-ctx.Done()
	f.mu.Lock()
	f.stopped = true
	for ep, s := range f.subs {
		s.cancel()
		delete(f.subs, ep)
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// Sync starts a subscriber for each endpoint of the pool that publishes
// events and has none, and stops those of endpoints no longer in the
// pool. It does nothing before Run or after Run returned.
func (f *Feed) Sync() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx == nil || f.stopped {
		return
	}
	present := map[*router.Endpoint]bool{}
	for _, ep := range f.rt.Pool().All() {
		if ep.KVEvents == "" {
			continue
		}
		present[ep] = true
		if f.subs[ep] == nil {
			f.start(ep)
		}
	}
	for ep, s := range f.subs {
		if !present[ep] {
			s.cancel()
			delete(f.subs, ep)
		}
	}
}

// start runs a subscriber for ep (under f.mu).
func (f *Feed) start(ep *router.Endpoint) {
	log := f.log.With(zap.String("worker", ep.ID), zap.String("kv_events", ep.KVEvents))
	cfg := kvevents.SubscriberConfig{Endpoint: ep.KVEvents, ReplayEndpoint: ep.KVEventsReplay}
	sub, err := kvevents.NewSubscriber(cfg, &sink{rt: f.rt, ep: ep, log: log}, log)
	if err != nil { // the fleet validated the endpoint; an admin-added one may not be
		log.Warn("not subscribing to the worker's KV events", zap.Error(err))
		return
	}
	f.rt.Cache(ep).AttachEvents()
	ctx, cancel := context.WithCancel(f.ctx)
	f.subs[ep] = &subscription{sub: sub, cancel: cancel}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := sub.Run(ctx); err != nil && ctx.Err() == nil {
			log.Warn("KV event subscriber stopped", zap.Error(err))
		}
	}()
	log.Info("subscribed to the worker's KV events")
}

// Stats returns each subscribed endpoint's subscriber counters.
func (f *Feed) Stats() map[*router.Endpoint]kvevents.SubscriberStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[*router.Endpoint]kvevents.SubscriberStats, len(f.subs))
	for ep, s := range f.subs {
		out[ep] = s.sub.Stats()
	}
	return out
}

// sink applies one worker's events to its cache index.
type sink struct {
	rt  *router.Router
	ep  *router.Endpoint
	log *zap.Logger
}

var _ kvevents.Sink = (*sink)(nil)

// Apply applies a batch. Only the GPU tier counts (blocks offloaded to CPU
// or disk must be loaded back before reuse, and are not what the
// engine's cached_tokens reports as its prefix cache hits).
func (s *sink) Apply(b kvevents.Batch) {
	c := s.cache()
	for _, ev := range b.Events {
		switch e := ev.(type) {
		case *kvevents.BlockStored:
			salt, named := identity(e)
			if !onGPU(e.Medium) || !named {
				continue
			}
			s.rt.SignalChanged(s.ep, c.Stored(kvindex.Stored{Hashes: keys(e.BlockHashes), Parent: e.ParentBlockHash.Key(),
				HasParent: e.HasParent, Tokens: e.TokenIDs, BlockSize: e.BlockSize, Seed: tokenizer.SaltSeed(salt)}))
		case *kvevents.BlockRemoved:
			if onGPU(e.Medium) {
				c.Removed(keys(e.BlockHashes))
			}
		case *kvevents.AllBlocksCleared:
			c.Cleared()
		}
	}
}

// Reset empties the worker's view: a restarted publisher is an engine with
// an empty cache; events lost otherwise leave the events view untrusted
// until it agrees with the engine's reports again.
func (s *sink) Reset(_ string, reason kvevents.ResetReason) {
	c := s.cache()
	if reason == kvevents.ResetRestart {
		c.Restarted()
		s.log.Info("KV event publisher restarted: the worker's cache is empty")
		return
	}
	s.rt.SignalChanged(s.ep, c.Lost("KV events lost ("+reason.String()+")"))
}

// cache is the worker's current cache index, with its events view on (a
// worker whose cache size changed got a new one).
func (s *sink) cache() *kvindex.Cache {
	c := s.rt.Cache(s.ep)
	c.AttachEvents()
	return c
}

func onGPU(medium string) bool { return medium == "" || medium == "GPU" }

// identity returns the salt duet hashes the requests that stored e's
// blocks with: their LoRA adapter (by name) and SGLang's cache salt, as
// tokenizer.AdapterSalt composes them, so that an adapter's blocks are
// indexed on the adapter's chain. named is false for blocks whose engine
// hash covers what duet cannot name (a LoRA adapter known only by its
// number, multimodal inputs, vLLM's cache salt inside extra_keys): duet's
// hash of their tokens would name another identity's blocks, so they are
// not indexed.
func identity(e *kvevents.BlockStored) (salt string, named bool) {
	if (e.LoraID != nil && e.LoraName == "") || !e.ExtraKeysNameOnly(e.LoraName) {
		return "", false
	}
	return tokenizer.AdapterSalt(e.LoraName, e.CacheSalt), true
}

func keys(hs []kvevents.BlockHash) []uint64 {
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = h.Key()
	}
	return out
}
