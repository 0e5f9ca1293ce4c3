package router

import "context"

// downSignal is one period of a worker's life between two times it was
// found down: ctx ends when the period does.
type downSignal struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newDownSignal() *downSignal {
	ctx, cancel := context.WithCancel(context.Background())
	return &downSignal{ctx: ctx, cancel: cancel}
}

// Down returns a context that ends when the worker is next found down:
// its health check marks it unhealthy, or an operator drains it with
// migration. A call in flight to the worker
// watches it to give up at once instead of waiting out its timeout (the
// caller then retries or migrates the request). Safe for concurrent use.
func (e *Endpoint) Down() context.Context {
	if s := e.down.Load(); s != nil {
		return s.ctx
	}
	e.down.CompareAndSwap(nil, newDownSignal())
	return e.down.Load().ctx
}

// MarkDown ends the context Down returned, so that every call in flight to
// the worker gives up; later calls watch a new one.
func (e *Endpoint) MarkDown() {
	if old := e.down.Swap(newDownSignal()); old != nil {
		old.cancel()
	}
}
