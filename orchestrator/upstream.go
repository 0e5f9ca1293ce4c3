package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/router"
	"github.com/valyala/fasthttp"
)

// upstream is the one pooled HTTP client to the workers: a fasthttp
// HostClient per worker URL, created on first use, used as a connection
// pool. duet drives each exchange itself (see exchange) so that a request
// whose client left closes its worker connection at once: fasthttp's own
// Do cannot be cancelled.
type upstream struct {
	maxConns int
	connWait time.Duration
	mu       sync.Mutex // guards clients
	clients  map[string]*fasthttp.HostClient
	// staleRetries counts exchanges run again on a new connection after
	// a pooled one turned out stale (exchange).
	staleRetries atomic.Int64
}

// countStale counts an exchange that was run again (retried).
func (u *upstream) countStale(retried bool) {
	if retried {
		u.staleRetries.Add(1)
	}
}

// idleConnLimit is how long a pooled connection may sit idle. It is below
// the 5 s keep-alive of uvicorn, the server under vLLM, TensorRT-LLM and
// SGLang (uvicorn config.py timeout_keep_alive), so duet rarely reuses a
// connection the worker is closing.
const idleConnLimit = 4 * time.Second

func newUpstream(cfg Config) *upstream {
	return &upstream{maxConns: cfg.MaxConnsPerWorker, connWait: cfg.ConnWaitTimeout, clients: map[string]*fasthttp.HostClient{}}
}

// client returns the pooled client for a worker base URL.
func (u *upstream) client(base string) (*fasthttp.HostClient, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if hc, ok := u.clients[base]; ok {
		return hc, nil
	}
	parsed, err := url.Parse(base)
	if err != nil || parsed.Host == "" {
		return nil, fmt.Errorf("worker url %q: not an absolute URL", base)
	}
	hc := &fasthttp.HostClient{
		Addr:                     hostPort(parsed),
		IsTLS:                    parsed.Scheme == "https",
		MaxConns:                 u.maxConns,
		MaxConnWaitTimeout:       u.connWait,
		MaxIdleConnDuration:      idleConnLimit,
		NoDefaultUserAgentHeader: true,
		ReadBufferSize:           16 << 10,
	}
	u.clients[base] = hc
	return hc, nil
}

// keep drops the pooled clients of workers that are not in eps, closing
// their idle connections (calls in flight keep their client until they
// end), so that a fleet that churns through workers does not grow the map
// without bound.
func (u *upstream) keep(eps []*router.Endpoint) {
	live := make(map[string]bool, len(eps))
	for _, ep := range eps {
		live[ep.URL] = true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for base, hc := range u.clients {
		if !live[base] {
			hc.CloseIdleConnections()
			delete(u.clients, base)
		}
	}
}

// conns counts the open connections to every worker, idle or in use.
func (u *upstream) conns() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, hc := range u.clients {
		n += hc.ConnsCount()
	}
	return n
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return u.Host + ":443"
	}
	return u.Host + ":80"
}

// newRequest builds a POST of r to base+path.
func newRequest(base, path string, r protocol.Request, requestID string) *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	req.SetRequestURI(base + path)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if requestID != "" {
		req.Header.Set("X-Request-ID", requestID)
	}
	for _, h := range r.Headers {
		req.Header.Set(h.Name, h.Value)
	}
	req.SetBodyRaw(r.Body)
	return req
}

// Errors a call can end with besides the worker's own. errTimeout marks a
// call that hit its deadline; errPoolBusy one that found no free pooled
// connection (duet's limit, not the worker's fault); errCancelled one whose
// request was abandoned (the client left); errUnsent one that failed before
// the worker could have read any of it (no connection), so that another
// worker may take the very same request.
var (
	errTimeout   = errors.New("timed out")
	errPoolBusy  = errors.New("no free upstream connection")
	errCancelled = errors.New("cancelled: the client went away")
	// errWorkerDown marks a call given up because its worker was found
	// down (router.Endpoint.MarkDown) while it was in flight.
	errWorkerDown = errors.New("given up: the worker was found down")
	errUnsent     = errors.New("could not connect")
)

// classify names a failed exchange: the request's own cancellation first,
// then the worker found down while the call was in flight (down), then the
// kinds passive health must not take for a dead worker.
func classify(ctx context.Context, err error, sent, down bool) error {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %v", errCancelled, err)
	case down:
		return fmt.Errorf("%w: %v", errWorkerDown, err)
	case errors.Is(err, fasthttp.ErrTimeout), errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%w: %v", errTimeout, err)
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return fmt.Errorf("%w: %v", errPoolBusy, err)
	case !sent:
		return fmt.Errorf("%w: %v", errUnsent, err)
	}
	return err
}

// reply is a whole worker response, its body copied out of fasthttp.
type reply struct {
	status int
	body   []byte
}

// post sends r to worker ep and reads the whole response before deadline,
// or until ctx ends or ep is found down (errWorkerDown).
func (u *upstream) post(ctx context.Context, ep *router.Endpoint, path string, r protocol.Request, requestID string, deadline time.Time) (reply, error) {
	hc, err := u.client(ep.URL)
	if err != nil {
		return reply{}, err
	}
	req := newRequest(ep.URL, path, r, requestID)
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	h, retried, err := exchange(ctx, ep, hc, req, resp, deadline, deadline)
	u.countStale(retried)
	if err != nil {
		return reply{}, err
	}
	h.release(false)
	return reply{status: resp.StatusCode(), body: append([]byte(nil), resp.Body()...)}, nil
}

// stream is a worker response whose body is read as it arrives.
type stream struct {
	status int
	ep     *router.Endpoint // the worker
	body   *streamBody
	resp   *fasthttp.Response
	conn   held
	once   sync.Once
}

// streamBody reads a streamed response body and remembers whether it was
// read to its end (only then may the connection be pooled again).
type streamBody struct {
	r   io.Reader
	eof atomic.Bool
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof.Store(true)
	}
	return n, err
}

// foundDown reports whether the worker was found down while the stream
// was open (its connection was then closed: see router.Endpoint.Watch).
func (s *stream) foundDown() bool { return s.ep.Downs() != s.conn.downs }

// closeBody ends the body stream, unblocking a pending read by closing the
// connection unless the body was read to its end; safe to call more than
// once and concurrently with a read. The worker sees the connection close.
func (s *stream) closeBody() {
	if !s.body.eof.Load() {
		_ = s.conn.conn.Close()
	}
}

// close ends the body stream and returns the connection and the response
// to their pools. No read may be running or start afterwards (a reader must
// be joined first).
func (s *stream) close() {
	s.once.Do(func() {
		s.closeBody()
		_ = s.resp.CloseBodyStream()
		s.conn.release(!s.body.eof.Load())
		fasthttp.ReleaseResponse(s.resp)
	})
}

// readError reads at most 64 KiB of an error response's body and closes it.
func (s *stream) readError() []byte {
	defer s.close()
	b, _ := io.ReadAll(io.LimitReader(s.body, 64<<10))
	return b
}

// openStream sends r with a streamed response and returns once the headers
// arrived, or errTimeout at headersBy. Reading the body ends at deadline;
// the caller bounds idle time by closing the stream. ctx ending, or ep
// being found down, cancels the call until the stream is closed.
func (u *upstream) openStream(ctx context.Context, ep *router.Endpoint, path string, r protocol.Request, requestID string, headersBy, deadline time.Time) (*stream, error) {
	hc, err := u.client(ep.URL)
	if err != nil {
		return nil, err
	}
	req := newRequest(ep.URL, path, r, requestID)
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = true
	h, retried, err := exchange(ctx, ep, hc, req, resp, headersBy, deadline)
	u.countStale(retried)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, err
	}
	var body io.Reader = resp.BodyStream()
	if body == nil { // no body to stream (fasthttp read it whole)
		body = bytes.NewReader(resp.Body())
	}
	return &stream{status: resp.StatusCode(), ep: ep, body: &streamBody{r: body}, resp: resp, conn: h}, nil
}
