package kvindex

// blockLRU is a bounded set of block hashes, least recently touched
// evicted first. Its entries live in one slice linked by index, so adding a
// block allocates nothing once the set is full (a 13k-token prompt adds
// 400 blocks). Not goroutine-safe: its Cache locks.
//
// Memory: a map entry (8-byte key, 4-byte value, with the map's own
// overhead) and a 16-byte node per block, about 54 bytes a block
// (BenchmarkCacheMemory measures it).
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
	return &blockLRU{capacity: max(capacity, 1), items: map[uint64]int32{}, head: -1, tail: -1}
}

func (b *blockLRU) has(h uint64) bool {
	_, ok := b.items[h]
	return ok
}

func (b *blockLRU) len() int { return len(b.items) }

// touch makes h the most recently used block, evicting the least recently
// used one when the set is full.
func (b *blockLRU) touch(h uint64) {
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

// remove drops h when held. Its node is recycled by the next touch of a
// full set: the free node moves to the tail.
func (b *blockLRU) remove(h uint64) {
	i, ok := b.items[h]
	if !ok {
		return
	}
	delete(b.items, h)
	b.unlink(i)
	// Swap the node with the last one so that nodes stays dense.
	last := int32(len(b.nodes) - 1)
	if i != last {
		moved := b.nodes[last]
		b.nodes[i] = moved
		b.items[moved.hash] = i
		if moved.prev >= 0 {
			b.nodes[moved.prev].next = i
		} else {
			b.head = i
		}
		if moved.next >= 0 {
			b.nodes[moved.next].prev = i
		} else {
			b.tail = i
		}
	}
	b.nodes = b.nodes[:last]
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
