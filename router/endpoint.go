package router

import (
	neturl "net/url"
	"strings"
	"sync/atomic"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router/kvindex"
)

// Endpoint is one worker as the router sees it. Its identity (ID, URL, Role)
// is fixed; health and load change atomically.
type Endpoint struct {
	// ID names the worker (e.g. ctx-0); unique in a Pool.
	ID string
	// URL is the worker's base URL, e.g. http://127.0.0.1:8100.
	URL string
	// Host is the URL's host name, without port ("" if URL does not parse),
	// computed once: it rides on every SGLang request.
	Host string
	// Role is what the worker serves.
	Role disagg.Role
	// BootstrapPort is an SGLang prefill worker's bootstrap port; 0 means
	// unknown (the decode worker uses its own). Set before the endpoint is
	// shared.
	BootstrapPort int
	// KVEvents is where the worker publishes its KV cache events (a ZMQ
	// endpoint), KVEventsReplay its replay socket; "" when none. Set before
	// the endpoint is shared.
	KVEvents, KVEventsReplay string

	healthy  atomic.Bool
	draining atomic.Bool
	inFlight inFlight     // the connections of its calls in flight (down.go)
	load     atomic.Int64 // token-weighted load of this replica's live leases
	remote   atomic.Int64 // the other duet replicas' load, as the shared store last said
	inflight atomic.Int64 // live leases
	// kvCacheTokens is the KV cache the worker reported, in tokens; 0:
	// none reported.
	kvCacheTokens atomic.Int64
	// kvBlockSize is the KV block size the worker reported, in tokens; 0:
	// none reported.
	kvBlockSize atomic.Int64
	// maxModelLen is the context length the worker reported, in tokens;
	// 0: none reported.
	maxModelLen atomic.Int64
	// adapters are the LoRA adapters the worker serves (adapters.go); nil:
	// none.
	adapters atomic.Pointer[adapterSet]
	// cache is what the router knows of the worker's KV cache (Router.Cache
	// makes it).
	cache atomic.Pointer[kvindex.Cache]

	// Passive health (outlier.go).
	ejectedUntil atomic.Int64 // unix nanoseconds; out of routing before it
	ejectStreak  atomic.Int32 // ejections since the last success
	fails5xx     atomic.Int32 // 5xx answers in a row
	ejections    atomic.Int64 // ejections ever
	probeUntil   atomic.Int64 // unix nanoseconds; a half-open probe is out before it
}

// NewEndpoint returns an endpoint that starts healthy with zero load.
func NewEndpoint(id, url string, role disagg.Role) *Endpoint {
	e := &Endpoint{ID: id, URL: url, Role: role}
	if u, err := neturl.Parse(url); err == nil {
		e.Host = u.Hostname()
	}
	e.healthy.Store(true)
	return e
}

// Identity is what names the worker the same way in every duet replica: its
// URL without a trailing slash (the ID is a name this process's config or
// admin call gave it, which another replica may give differently). A
// worker without a URL (tests) is identified by its ID.
func (e *Endpoint) Identity() string {
	if e.URL == "" {
		return e.ID
	}
	return URLIdentity(e.URL)
}

// URLIdentity is the identity of the worker at url (Endpoint.Identity), for
// code that names workers by URL before they are endpoints.
func URLIdentity(url string) string { return strings.TrimSuffix(url, "/") }

// String returns the endpoint's ID, for logs and errors.
func (e *Endpoint) String() string { return e.ID }

// Healthy reports whether the worker passed its last health check.
func (e *Endpoint) Healthy() bool { return e.healthy.Load() }

// KVCacheTokens returns the KV cache the worker reported, in tokens (0:
// none reported). The fleet reads it from the engine when the worker comes
// up; Pool.Sync sets it.
func (e *Endpoint) KVCacheTokens() int64 { return e.kvCacheTokens.Load() }

// KVBlockSize returns the KV block size the worker reported, in tokens (0:
// none reported); Pool.Sync sets it.
func (e *Endpoint) KVBlockSize() int { return int(e.kvBlockSize.Load()) }

// MaxModelLen returns the context length the worker reported, in tokens
// (prompt plus output; 0: none reported). The fleet reads it from the
// engine when the worker comes up; Pool.Sync sets it.
func (e *Endpoint) MaxModelLen() int { return int(e.maxModelLen.Load()) }

// Draining reports whether the worker takes no new work (it finishes what it
// has).
func (e *Endpoint) Draining() bool { return e.draining.Load() }

// SetDraining marks the worker as draining or not.
func (e *Endpoint) SetDraining(d bool) { e.draining.Store(d) }

// Available reports whether new work may be routed to the worker.
func (e *Endpoint) Available() bool { return e.Healthy() && !e.Draining() }

// Load returns the token-weighted load of the leases in flight: this
// replica's and, with shared state, the other replicas' (SetRemoteLoad).
func (e *Endpoint) Load() int64 { return e.load.Load() + e.remote.Load() }

// LocalLoad returns the load of this replica's leases only: what a replica
// publishes to the others.
func (e *Endpoint) LocalLoad() int64 { return e.load.Load() }

// SetRemoteLoad sets the load the other duet replicas charge the worker
// (negative counts as 0).
func (e *Endpoint) SetRemoteLoad(tokens int64) { e.remote.Store(max(tokens, 0)) }

// InFlight returns the number of leases in flight.
func (e *Endpoint) InFlight() int64 { return e.inflight.Load() }

// Acquire charges tokens (>= 0; negative counts as 0) to the endpoint and
// returns the lease that refunds them. Callers must Release the lease on
// every path, typically with defer right after Acquire.
func (e *Endpoint) Acquire(tokens int64) *Lease {
	if tokens < 0 {
		tokens = 0
	}
	e.load.Add(tokens)
	e.inflight.Add(1)
	return &Lease{ep: e, tokens: tokens}
}

// Lease is load charged to one endpoint for one phase of one request.
type Lease struct {
	ep       *Endpoint
	tokens   int64
	released atomic.Bool
}

// Endpoint returns the endpoint the lease charges.
func (l *Lease) Endpoint() *Endpoint { return l.ep }

// Tokens returns the load the lease charged.
func (l *Lease) Tokens() int64 { return l.tokens }

// Release refunds the lease. It is safe to call more than once and from
// several goroutines: only the first call refunds. A nil lease is a no-op.
func (l *Lease) Release() {
	if l == nil || !l.released.CompareAndSwap(false, true) {
		return
	}
	l.ep.load.Add(-l.tokens)
	l.ep.inflight.Add(-1)
}
