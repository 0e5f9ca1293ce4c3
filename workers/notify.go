package workers

import "sync"

// notifier fans change signals out to subscribers. Signals coalesce: each
// subscriber has a one-slot channel, and a signal sent while one is pending
// is dropped. It is safe for concurrent use.
type notifier struct {
	// mu guards subs, next and closed.
	mu     sync.Mutex
	subs   map[int]chan struct{}
	next   int
	closed bool
}

// subscribe returns a channel that receives a value after changes and a
// function that unsubscribes and closes it. The channel is also closed by
// close. On a closed notifier the channel is already closed.
func (n *notifier) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		close(ch)
		return ch, func() {}
	}
	if n.subs == nil {
		n.subs = map[int]chan struct{}{}
	}
	id := n.next
	n.next++
	n.subs[id] = ch
	return ch, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if c, ok := n.subs[id]; ok {
			delete(n.subs, id)
			close(c)
		}
	}
}

// notify signals every subscriber without blocking.
func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close closes every subscriber's channel; later subscriptions get a
// closed channel. Calling it again does nothing.
func (n *notifier) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.closed = true
	for id, ch := range n.subs {
		delete(n.subs, id)
		close(ch)
	}
}
