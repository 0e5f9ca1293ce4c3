package loadgen

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"
)

// Client sends benchmark requests to OpenAI-compatible endpoints (one per
// configured URL) and times them. It is safe for concurrent use.
type Client struct {
	hc    *http.Client
	urls  []string // cfg.URLs with the endpoint's path
	next  atomic.Uint64
	cfg   Config
	now   func() time.Time // the run's clock (time.Now for NewClient)
	epoch time.Time        // base of the atomically stored trace times
}

// NewClient returns a client for cfg's endpoint. A nil hc gets a transport
// with keep-alive connections for maxConns parallel streams and no
// timeouts of its own (Config.RequestTimeout bounds each request).
func NewClient(cfg Config, hc *http.Client, maxConns int) *Client {
	return newClient(cfg, hc, maxConns, time.Now)
}

// newClient is NewClient timing requests with now.
func newClient(cfg Config, hc *http.Client, maxConns int, now func() time.Time) *Client {
	if hc == nil {
		hc = &http.Client{Transport: NewTransport(maxConns)}
	}
	cfg = cfg.withDefaults()
	urls := make([]string, len(cfg.URLs))
	for i, u := range cfg.URLs {
		urls[i] = u + cfg.endpointPath()
	}
	return &Client{hc: hc, urls: urls, cfg: cfg, now: now, epoch: now()}
}

// nextURL returns the index of the next URL in round-robin order.
func (c *Client) nextURL() int { return int((c.next.Add(1) - 1) % uint64(len(c.urls))) }

// NewTransport returns an HTTP/1.1 transport that keeps up to maxConns
// idle connections per host and never compresses.
func NewTransport(maxConns int) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: max(maxConns, 16),
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// do sends one request to URL number url and reads its whole answer. ctx
// cancels it (the exchange is then marked cancelled); cfg.RequestTimeout
// bounds it.
func (c *Client) do(ctx context.Context, url int, body []byte, requestID, sessionID string) *exchange {
	ex := &exchange{}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	var wrote, ack atomic.Int64 // c.since() values, 0 = not yet
	trace := &httptrace.ClientTrace{
		WroteRequest:         func(httptrace.WroteRequestInfo) { wrote.Store(c.since()) },
		GotFirstResponseByte: func() { ack.Store(c.since()) },
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(rctx, trace), http.MethodPost, c.urls[url], bytes.NewReader(body))
	if err != nil {
		ex.err = newError(ErrConnection, "%v", err)
		return ex
	}
	c.setHeaders(req.Header, requestID, sessionID)
	attempt := c.now()
	classify := func(err error) *ErrorDetails { return c.classify(ctx, rctx, err, ex) }
	resp, err := c.hc.Do(req)
	ex.start = c.at(wrote.Load(), attempt)
	if err != nil {
		ex.end = c.now()
		ex.err = classify(err)
		return ex
	}
	defer resp.Body.Close()
	ex.ack = c.at(ack.Load(), time.Time{})
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		ex.end = c.now()
		ex.err = statusError(resp.StatusCode, b)
		return ex
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		readStream(resp.Body, c.now, ex, classify)
	} else {
		readBody(resp.Body, c.now, ex, classify)
	}
	if ex.err == nil && ex.chunks == 0 {
		ex.err = newError(ErrEmptyResponse, "the answer has no content (finish_reason %q)", ex.finish)
	}
	return ex
}

func (c *Client) setHeaders(h http.Header, requestID, sessionID string) {
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "duet-bench")
	if c.cfg.Streaming {
		h.Set("Accept", "text/event-stream")
	}
	if c.cfg.APIKey != "" {
		h.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	h.Set("X-Request-ID", requestID)
	if c.cfg.SessionHeader != "none" && sessionID != "" {
		h.Set(c.cfg.SessionHeader, sessionID)
		if !c.cfg.NoAffinityHeader {
			h.Set(AffinityHeader, sessionID)
		}
	}
	for _, hd := range c.cfg.Headers {
		h.Set(hd.Name, hd.Value)
	}
}

// classify turns a transport or read error into an ErrorDetails: the run
// being stopped is a cancellation, the request's own deadline a timeout.
func (c *Client) classify(parent, rctx context.Context, err error, ex *exchange) *ErrorDetails {
	switch {
	case parent.Err() != nil:
		ex.cancelled = true
		code := 499
		return &ErrorDetails{Code: &code, Type: ErrCancelled, Message: "request cancelled when the benchmark stopped"}
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		return newError(ErrTimeout, "no complete answer within %s", c.cfg.RequestTimeout)
	case ex.ack.IsZero():
		return newError(ErrConnection, "%v", err)
	default:
		return newError(ErrRead, "%v", err)
	}
}

// since returns the time since c.epoch in ns plus one, so that 0 can mean
// "not yet" even for an event at the epoch itself (a fake clock that has
// not moved).
func (c *Client) since() int64 { return int64(c.now().Sub(c.epoch)) + 1 }

// at converts a stored since() value back, or returns fallback when unset.
func (c *Client) at(v int64, fallback time.Time) time.Time {
	if v == 0 {
		return fallback
	}
	return c.epoch.Add(time.Duration(v - 1))
}
