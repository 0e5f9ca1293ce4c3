package orchestrator

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/duet-serve/duet/router"
	"github.com/valyala/fasthttp"
)

// held is a pooled worker connection a streamed body still reads from.
// release returns it to the pool, or closes it when discard is set (the
// body was not read to its end).
type held struct {
	conn    net.Conn
	release func(discard bool)
	// downs is the worker's Downs count when the call began: a later
	// count says the worker was found down and the call given up.
	downs uint64
}

// exchange runs one HTTP exchange on a pooled connection of hc: it writes
// req and reads the response headers by headersBy, then the body by
// deadline (resp.StreamBody leaves the body to the caller, reading under
// the same deadline). While the exchange, and for a stream its body, is
// live, ctx ending closes the connection, so the worker sees its client
// leave (vLLM, TensorRT-LLM and SGLang abort a request whose connection
// closes); so does ep being found down (router.Endpoint.Watch): the call
// gives up at once rather than at its deadline. A reused keep-alive connection the worker closed while it sat
// idle fails before any response byte; the exchange then runs once more on
// a new connection, as Go's net/http does for the same race. The other
// idle connections are closed first: a worker that closed one closed the
// others of the same age too, or all of them when it restarted, and the
// retry must not take another. retried reports that second run.
func exchange(ctx context.Context, ep *router.Endpoint, hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response,
	headersBy, deadline time.Time) (h held, retried bool, err error) {
	h, staleConn, err := exchangeOnce(ctx, ep, hc, req, resp, headersBy, deadline)
	if staleConn && ctx.Err() == nil {
		hc.CloseIdleConnections()
		h, _, err = exchangeOnce(ctx, ep, hc, req, resp, headersBy, deadline)
		return h, true, err
	}
	return h, false, err
}

// exchangeOnce is one try of exchange. staleConn reports a failure of a
// reused connection before the worker answered anything.
func exchangeOnce(ctx context.Context, ep *router.Endpoint, hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response,
	headersBy, deadline time.Time) (h held, staleConn bool, err error) {
	if err := ctx.Err(); err != nil {
		return held{}, false, classify(ctx, err, false, false)
	}
	cc, err := hc.AcquireConn(time.Until(headersBy), false)
	if err != nil {
		return held{}, false, classify(ctx, err, false, false)
	}
	conn := cc.Conn()
	reused := !cc.LastUseTime().IsZero()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	downs := ep.Watch(conn)
	var br *bufio.Reader
	release := func(discard bool) {
		stop()
		ep.Unwatch(conn)
		if br != nil {
			hc.ReleaseReader(br)
		}
		if discard || resp.ConnectionClose() {
			hc.CloseConn(cc)
		} else {
			hc.ReleaseConn(cc)
		}
	}
	if err := send(hc, conn, req, headersBy); err != nil {
		release(true)
		return held{}, reused, classify(ctx, err, true, ep.Downs() != downs)
	}
	streaming := resp.StreamBody
	resp.Reset()
	resp.StreamBody = streaming
	br = hc.AcquireReader(conn)
	err = conn.SetReadDeadline(headersBy)
	if err == nil {
		err = resp.Read(br)
	}
	if err == nil && streaming {
		err = conn.SetReadDeadline(deadline)
	}
	if err != nil {
		release(true)
		return held{}, reused && unanswered(err), classify(ctx, err, true, ep.Downs() != downs)
	}
	return held{conn: conn, release: release, downs: downs}, false, nil
}

// send writes req to conn by deadline.
func send(hc *fasthttp.HostClient, conn net.Conn, req *fasthttp.Request, deadline time.Time) error {
	if err := conn.SetWriteDeadline(deadline); err != nil {
		return err
	}
	bw := hc.AcquireWriter(conn)
	defer hc.ReleaseWriter(bw)
	if err := req.Write(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// unanswered reports a read error that means the worker closed the
// connection without answering: a clean end of stream before the status
// line, or a reset.
func unanswered(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}
