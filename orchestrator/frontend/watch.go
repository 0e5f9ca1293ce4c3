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
// (ngx_http_test_reading, src/http/ngx_http_request.c): it waits until the
// connection is readable and peeks at it without consuming anything. An
// end of stream or a reset means the client is gone. Bytes mean the client
// sent more (a pipelined request): then the watch ends without a verdict,
// and a disconnect is found, as before, by the next failed write. A
// connection that is not a socket (an in-memory listener, TLS) is not
// watched.
func watchClient(conn net.Conn) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return ctx, func() { cancel(nil) }
	}
	rc, err := sc.SyscallConn()
	if err != nil || conn.SetReadDeadline(time.Time{}) != nil {
		return ctx, func() { cancel(nil) }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if peerClosed(rc) {
			cancel(errClientGone)
		}
	}()
	return ctx, func() {
		_ = conn.SetReadDeadline(time.Unix(1, 0)) // wakes the watcher
		<-done
		_ = conn.SetReadDeadline(time.Time{})
		cancel(nil)
	}
}
