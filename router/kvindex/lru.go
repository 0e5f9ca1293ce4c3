package kvindex

import "github.com/duet-serve/duet/tokenizer/blockmap"

// blockLRU is a bounded set of block hashes, least recently touched
// evicted first. Its entries live in one slice linked by index, so adding a
// block allocates nothing once the set is full (a 13k-token prompt adds
// 400 blocks). Not goroutine-safe: its Cache locks.
//
// Memory: a map slot (8-byte key, 4-byte value, a used flag, at a load of
// at most one half) and a 16-byte node per block (BenchmarkCacheMemory
// measures it).
type blockLRU struct {
	capacity int
	items    *blockmap.Map // hash -> index in nodes
	nodes    []lruNode
	// head is the most recently used node, tail the least; -1 when empty.
	head, tail int32
}

type lruNode struct {
	hash       uint64
	prev, next int32 // -1: none
}

func newBlockLRU(capacity int) *blockLRU {
	capacity = max(capacity, 1)
	return &blockLRU{capacity: capacity, items: blockmap.New(min(capacity, 1<<16)), head: -1, tail: -1}
}

func (b *blockLRU) has(h uint64) bool { return b.items.Has(h) }

func (b *blockLRU) len() int { return b.items.Len() }

// touch makes h the most recently used block, evicting the least recently
// used one when the set is full.
func (b *blockLRU) touch(h uint64) {
	if i, ok := b.items.Get(h); ok {
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
		b.items.Delete(b.nodes[i].hash)
	}
	b.nodes[i].hash = h
	b.items.Put(h, i)
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
