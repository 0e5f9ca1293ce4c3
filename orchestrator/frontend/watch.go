package frontend

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"
)

// errClientGone is the cause of a request context whose client closed its
// connection.
var errClientGone = errors.New("client closed the connection")

// watchClient returns a context that ends, with cause errClientGone, when
// the client closes conn while duet works on its request, and stop, which
// ends the watch and the context. stop must return before fasthttp reads
// conn again (it does: stop joins the watcher).
//
// fasthttp says nothing of a client that leaves before the first byte of
// the answer is written (RequestCtx.Done fires only at shutdown), so duet
// watches the socket itself, as nginx does for proxied requests
// (ngx_http_test_reading, src/http/ngx_http_request.c): a goroutine waits
// until the connection is readable and peeks at it, never consuming
// anything. An end of stream or a reset means the client is gone. Bytes
// mean the client sent more (a pipelined request): then the watch ends
// without a verdict, and a disconnect is found, as before, by the next
// failed write. The context's Err also peeks, without waiting, so the
// checks duet makes before each upstream call do not depend on when the
// watcher is scheduled. A connection that is not a socket (an in-memory
// listener, TLS) is not watched.
func watchClient(conn net.Conn) (context.Context, func()) {
	ctx, stop, _ := watch(conn)
	return ctx, stop
}

// watch is watchClient, and also returns a channel closed when the watcher
// ended (with or without a verdict; tests wait on it).
func watch(conn net.Conn) (context.Context, func(), <-chan struct{}) {
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	unwatched := func() (context.Context, func(), <-chan struct{}) {
		close(done)
		return ctx, func() { cancel(nil) }, done
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return unwatched()
	}
	rc, err := sc.SyscallConn()
	if err != nil || conn.SetReadDeadline(time.Time{}) != nil {
		return unwatched()
	}
	go func() {
		defer close(done)
		if peerClosed(rc) {
			cancel(errClientGone)
		}
	}()
	stop := func() {
		_ = conn.SetReadDeadline(time.Unix(1, 0)) // wakes the watcher
		<-done
		_ = conn.SetReadDeadline(time.Time{})
		cancel(nil)
	}
	return &clientContext{Context: ctx, rc: rc, cancel: cancel}, stop, done
}

// clientContext is a client's request context whose Err looks at the
// socket: a client found gone is cancelled first, so Done is closed
// before Err reports it, as the Context contract requires.
type clientContext struct {
	context.Context
	rc     syscall.RawConn
	cancel context.CancelCauseFunc
}

func (c *clientContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if peerClosedNow(c.rc) {
		c.cancel(errClientGone)
	}
	return c.Context.Err()
}
