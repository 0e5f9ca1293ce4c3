package router

import (
	"io"
	"sync"
	"sync/atomic"
)

// inFlight holds the connections of a worker's calls in flight, which are
// closed when the worker is found down.
type inFlight struct {
	mu    sync.Mutex // guards conns and orders Watch with MarkDown
	conns map[io.Closer]struct{}
	downs atomic.Uint64
}

// Watch registers c, the connection of a call in flight to the worker,
// until Unwatch: when the worker is found down (MarkDown: its health check
// marks it unhealthy, or an operator drains it with migration) c is
// closed, so that the call gives up at once instead of waiting out its
// timeout, and the caller retries or migrates the request. It returns the
// count Downs had then: a call that finds Downs changed after a failure
// was given up because the worker was found down. Safe for concurrent use.
func (e *Endpoint) Watch(c io.Closer) uint64 {
	f := &e.inFlight
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		f.conns = map[io.Closer]struct{}{}
	}
	f.conns[c] = struct{}{}
	return f.downs.Load()
}

// Unwatch ends Watch(c).
func (e *Endpoint) Unwatch(c io.Closer) {
	f := &e.inFlight
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

// Downs counts the times the worker was found down.
func (e *Endpoint) Downs() uint64 { return e.inFlight.downs.Load() }

// MarkDown closes the connection of every call in flight to the worker
// (see Watch).
func (e *Endpoint) MarkDown() {
	f := &e.inFlight
	f.mu.Lock()
	defer f.mu.Unlock()
	f.downs.Add(1)
	for c := range f.conns {
		_ = c.Close()
	}
	clear(f.conns)
}
