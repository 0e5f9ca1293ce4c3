package router

import (
	"sync"
	"sync/atomic"
)

// KVAware scores each worker by the prompt prefix it is believed to hold
// minus its load: score = cached tokens − load_weight × load tokens. It
// remembers the block hashes it sent to each worker in a bounded LRU per
// worker, an estimate of the worker's cache. For many short, independent
// requests that share long prefixes.
type KVAware struct {
	cfg       Config
	pool      *Pool
	blockSize int
	weight    float64
	turn      atomic.Uint64

	// mu guards blocks.
	mu     sync.Mutex
	blocks map[string]*blockLRU
}

var _ picker = (*KVAware)(nil)

func newKVAware(cfg Config, pool *Pool) *KVAware {
	return &KVAware{cfg: cfg, pool: pool, blockSize: cfg.TokensPerBlock, weight: cfg.LoadWeight, blocks: map[string]*blockLRU{}}
}

func (k *KVAware) pick(req *Request, ctxCands, genCands []*Endpoint) choice {
	k.mu.Lock()
	defer k.mu.Unlock()
	ctx, ctxCached := k.best(req.Hashes, ctxCands)
	gen, genCached := k.best(req.Hashes, otherThan(genCands, ctx))
	ch := choice{ctx: ctx, gen: gen, decision: PolicyKVAware, session: req.SessionKey,
		ctxCached: ctxCached, ctxExpectedHeld: ctxCached, genCached: genCached}
	return ch.charge(req)
}

// best returns the highest-scoring candidate and its matched tokens; ties
// rotate.
func (k *KVAware) best(hashes []uint64, cands []*Endpoint) (*Endpoint, int) {
	turn := int(k.turn.Add(1))
	var best *Endpoint
	bestScore, bestCached := 0.0, 0
	for i := range cands {
		ep := cands[(turn+i)%len(cands)]
		cached := k.matched(ep.ID, hashes) * k.blockSize
		score := float64(cached) - k.weight*float64(ep.Load())
		if best == nil || score > bestScore {
			best, bestScore, bestCached = ep, score, cached
		}
	}
	return best, bestCached
}

// matched counts the leading blocks of hashes the worker holds.
func (k *KVAware) matched(worker string, hashes []uint64) int {
	b := k.blocks[worker]
	if b == nil {
		return 0
	}
	n := 0
	for _, h := range hashes {
		if !b.has(h) {
			break
		}
		n++
	}
	return n
}

// done learns what a finished request left in the workers' caches: the
// prompt's blocks on the ctx worker when the context phase ran, on the gen
// worker when the generation phase did. A failed phase teaches nothing.
func (k *KVAware) done(ctxID, genID string, hashes []uint64, o Outcome) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if o.CtxRan {
		k.remember(ctxID, hashes)
	}
	if o.GenRan {
		k.remember(genID, hashes)
	}
}

func (k *KVAware) remember(worker string, hashes []uint64) {
	b := k.blocks[worker]
	if capacity := k.cfg.cacheBlocks(k.pool.Get(worker)); b == nil || b.capacity != capacity {
		b = newBlockLRU(capacity) // a worker that reports a new size was restarted: its cache is empty
		k.blocks[worker] = b
	}
	for _, h := range hashes {
		b.add(h)
	}
}

// blockLRU is a bounded set of block hashes, least recently added or
// touched evicted first. Its entries live in one slice linked by index, so
// adding a block allocates nothing once the set is full (a prompt of 13k
// tokens adds 400 blocks per phase). Not goroutine-safe.
type blockLRU struct {
	capacity int
	items    map[uint64]int32 // hash -> index in nodes
	nodes    []lruNode
	// head is the most recently used node, tail the least; -1 when empty.
	head, tail int32
}

type lruNode struct {
	hash       uint64
	prev, next int32 // -1: none
}

func newBlockLRU(capacity int) *blockLRU {
	return &blockLRU{capacity: capacity, items: map[uint64]int32{}, head: -1, tail: -1}
}

func (b *blockLRU) has(h uint64) bool {
	_, ok := b.items[h]
	return ok
}

// add makes h the most recently used block, evicting the least recently
// used one when the set is full.
func (b *blockLRU) add(h uint64) {
	if i, ok := b.items[h]; ok {
		b.unlink(i)
		b.pushFront(i)
		return
	}
	var i int32
	if len(b.nodes) < b.capacity {
		b.nodes = append(b.nodes, lruNode{})
		i = int32(len(b.nodes) - 1)
	} else {
		i = b.tail
		b.unlink(i)
		delete(b.items, b.nodes[i].hash)
	}
	b.nodes[i].hash = h
	b.items[h] = i
	b.pushFront(i)
}

func (b *blockLRU) unlink(i int32) {
	n := &b.nodes[i]
	if n.prev >= 0 {
		b.nodes[n.prev].next = n.next
	} else {
		b.head = n.next
	}
	if n.next >= 0 {
		b.nodes[n.next].prev = n.prev
	} else {
		b.tail = n.prev
	}
}

func (b *blockLRU) pushFront(i int32) {
	b.nodes[i].prev, b.nodes[i].next = -1, b.head
	if b.head >= 0 {
		b.nodes[b.head].prev = i
	}
	b.head = i
	if b.tail < 0 {
		b.tail = i
	}
}
