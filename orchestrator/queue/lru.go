package queue

import "container/list"

// lru is a map bounded to max entries; beyond it, put evicts the least
// recently put (or touched) entry. Not goroutine-safe: its owner locks.
type lru[V any] struct {
	max   int
	items map[string]*list.Element
	order *list.List // of *lruEntry[V]; front: most recently put
}

type lruEntry[V any] struct {
	key string
	val V
}

// newLRU returns an empty lru holding at most max (>= 1) entries.
func newLRU[V any](max int) *lru[V] {
	return &lru[V]{max: max, items: map[string]*list.Element{}, order: list.New()}
}

// peek returns the value of key without changing its recency.
func (c *lru[V]) peek(key string) (V, bool) {
	if e, ok := c.items[key]; ok {
		return e.Value.(*lruEntry[V]).val, true
	}
	var zero V
	return zero, false
}

// put stores val under key as the most recent entry, evicting the least
// recent one beyond max.
func (c *lru[V]) put(key string, val V) {
	if e, ok := c.items[key]; ok {
		e.Value.(*lruEntry[V]).val = val
		c.order.MoveToFront(e)
		return
	}
	c.items[key] = c.order.PushFront(&lruEntry[V]{key: key, val: val})
	for len(c.items) > c.max {
		c.remove(c.order.Back().Value.(*lruEntry[V]).key)
	}
}

// oldest returns the least recent entry, ok false when empty.
func (c *lru[V]) oldest() (key string, val V, ok bool) {
	if e := c.order.Back(); e != nil {
		ent := e.Value.(*lruEntry[V])
		return ent.key, ent.val, true
	}
	return "", val, false
}

// remove deletes key; absent keys are a no-op.
func (c *lru[V]) remove(key string) {
	if e, ok := c.items[key]; ok {
		c.order.Remove(e)
		delete(c.items, key)
	}
}

// len returns the number of entries.
func (c *lru[V]) len() int { return len(c.items) }
