package orchestrator

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"time"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/valyala/fasthttp"
)

// upstream is the one pooled HTTP client to the workers: a fasthttp
// HostClient per worker URL, created on first use.
type upstream struct {
	maxConns   int
	connWait   time.Duration
	totalLimit time.Duration
	mu         sync.Mutex // guards clients
	clients    map[string]*fasthttp.HostClient
}

func newUpstream(cfg Config) *upstream {
	return &upstream{maxConns: cfg.MaxConnsPerWorker, connWait: cfg.ConnWaitTimeout,
		totalLimit: cfg.StreamTotalTimeout, clients: map[string]*fasthttp.HostClient{}}
}

// client returns the pooled client for a worker base URL. No read deadline
// is set: fasthttp's read timeouts cover a whole streamed body and would cut
// long generations; the caller bounds each call instead.
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
		Addr:                          hostPort(parsed),
		IsTLS:                         parsed.Scheme == "https",
		MaxConns:                      u.maxConns,
		MaxConnWaitTimeout:            u.connWait,
		MaxIdleConnDuration:           30 * time.Second,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: false,
		ReadBufferSize:                16 << 10,
	}
	u.clients[base] = hc
	return hc, nil
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

// errTimeout marks a call that hit its deadline; errPoolBusy one that
// found no free pooled connection (duet's limit, not the worker's fault).
var (
	errTimeout  = errors.New("timed out")
	errPoolBusy = errors.New("no free upstream connection")
)

// classify wraps fasthttp's errors that passive health must not take for a
// dead worker.
func classify(err error) error {
	switch {
	case errors.Is(err, fasthttp.ErrTimeout):
		return fmt.Errorf("%w: %v", errTimeout, err)
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return fmt.Errorf("%w: %v", errPoolBusy, err)
	}
	return err
}

// reply is a whole worker response, its body copied out of fasthttp.
type reply struct {
	status int
	body   []byte
}

// post sends r and reads the whole response before deadline.
func (u *upstream) post(base, path string, r protocol.Request, requestID string, deadline time.Time) (reply, error) {
	hc, err := u.client(base)
	if err != nil {
		return reply{}, err
	}
	req := newRequest(base, path, r, requestID)
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := hc.DoDeadline(req, resp, deadline); err != nil {
		return reply{}, classify(err)
	}
	return reply{status: resp.StatusCode(), body: append([]byte(nil), resp.Body()...)}, nil
}

// stream is a worker response whose body is read as it arrives.
type stream struct {
	status int
	body   io.Reader
	resp   *fasthttp.Response
	once   sync.Once
}

// closeBody ends the body stream, unblocking a pending read; safe to call
// more than once and concurrently with a read.
func (s *stream) closeBody() { _ = s.resp.CloseBodyStream() }

// close ends the body stream and returns the response to the pool. No read
// may be running or start afterwards (a reader must be joined first).
func (s *stream) close() {
	s.once.Do(func() {
		s.closeBody()
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
// arrived, or errTimeout at firstBy. The whole exchange, body included, ends
// at deadline; the caller bounds idle time by closing the stream. On a
// timeout the in-flight call is abandoned to a goroutine that releases it
// when the call ends.
func (u *upstream) openStream(base, path string, r protocol.Request, requestID string, firstBy, deadline time.Time) (*stream, error) {
	hc, err := u.client(base)
	if err != nil {
		return nil, err
	}
	req := newRequest(base, path, r, requestID)
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = true
	done := make(chan error, 1)
	go func() {
		defer fasthttp.ReleaseRequest(req)
		done <- hc.DoDeadline(req, resp, deadline)
	}()
	timer := time.NewTimer(time.Until(firstBy))
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			fasthttp.ReleaseResponse(resp)
			return nil, classify(err)
		}
		body := resp.BodyStream()
		if body == nil { // fasthttp had the whole body already
			body = bytes.NewReader(resp.Body())
		}
		return &stream{status: resp.StatusCode(), body: body, resp: resp}, nil
	case <-timer.C:
		go func() {
			if <-done == nil {
				_ = resp.CloseBodyStream()
			}
			fasthttp.ReleaseResponse(resp)
		}()
		return nil, fmt.Errorf("%w: no response headers by the first-event deadline", errTimeout)
	}
}
