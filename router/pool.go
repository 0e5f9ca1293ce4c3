package router

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/duet-serve/duet/proto/disagg"
)

// Member describes one worker in a membership update (from the fleet or the
// admin API).
type Member struct {
	ID   string
	URL  string
	Role disagg.Role
	// BootstrapPort is an SGLang prefill worker's bootstrap port, sent to
	// the decode worker as bootstrap_port; 0 means unknown (sent as null:
	// the decode worker uses its own port). Other protocols ignore it.
	BootstrapPort int
	Healthy       bool
	// KVCacheTokens is the KV cache the worker reported, in tokens; 0:
	// none reported.
	KVCacheTokens int64
	// KVBlockSize is the KV block size in tokens the worker reported; 0:
	// none reported.
	KVBlockSize int
	// MaxModelLen is the context length the worker reported, in tokens
	// (prompt plus output); 0: none reported.
	MaxModelLen int
	// KVEvents is where the worker publishes its KV cache events, and
	// KVEventsReplay its replay socket; "" when none.
	KVEvents, KVEventsReplay string
	// Adapters are the LoRA adapters the worker serves besides its base
	// model (any order).
	Adapters []string
}

// Pool is the set of workers the router may use. Endpoints keep their
// identity (and so their load and cache index) across Sync calls as long
// as their ID, URL, Role, BootstrapPort and KV events endpoints are
// unchanged.
type Pool struct {
	// mu serialises writers; readers use the atomic snapshot.
	mu       sync.Mutex
	snapshot atomic.Pointer[poolSnapshot]
	onChange []func()
}

// poolSnapshot is immutable once published.
type poolSnapshot struct {
	all        []*Endpoint // sorted by ID
	byID       map[string]*Endpoint
	byIdentity map[string]*Endpoint // the first by ID of each identity
	version    uint64               // bumped when membership (not health) changes
}

// NewPool returns an empty pool.
func NewPool() *Pool {
	p := &Pool{}
	p.snapshot.Store(&poolSnapshot{byID: map[string]*Endpoint{}})
	return p
}

// OnMembershipChange registers fn to run (synchronously, under the pool's
// writer lock — keep it short and do not call back into Sync) after every
// Sync that added or removed a worker. Register before the first Sync.
func (p *Pool) OnMembershipChange(fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onChange = append(p.onChange, fn)
}

// Sync makes the pool hold exactly members: new IDs are added, missing ones
// removed, and health is updated in place. A repeated ID keeps its first
// member. It reports whether membership changed.
func (p *Pool) Sync(members []Member) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.snapshot.Load()
	next := &poolSnapshot{byID: make(map[string]*Endpoint, len(members)), version: old.version}
	changed := false
	for _, m := range members {
		if next.byID[m.ID] != nil {
			continue
		}
		ep, ok := old.byID[m.ID]
		if !ok || ep.URL != m.URL || ep.Role != m.Role || ep.BootstrapPort != m.BootstrapPort ||
			ep.KVEvents != m.KVEvents || ep.KVEventsReplay != m.KVEventsReplay {
			ep = NewEndpoint(m.ID, m.URL, m.Role)
			ep.BootstrapPort = m.BootstrapPort
			ep.KVEvents, ep.KVEventsReplay = m.KVEvents, m.KVEventsReplay
			changed = true
		}
		if ep.healthy.Swap(m.Healthy) && !m.Healthy {
			ep.MarkDown() // its calls in flight stop waiting for it
		}
		ep.kvCacheTokens.Store(m.KVCacheTokens)
		ep.kvBlockSize.Store(int64(m.KVBlockSize))
		ep.maxModelLen.Store(int64(m.MaxModelLen))
		ep.setAdapters(m.Adapters)
		next.byID[m.ID] = ep
		next.all = append(next.all, ep)
	}
	sort.Slice(next.all, func(i, j int) bool { return next.all[i].ID < next.all[j].ID })
	next.byIdentity = make(map[string]*Endpoint, len(next.all))
	for _, ep := range next.all {
		if _, dup := next.byIdentity[ep.Identity()]; !dup {
			next.byIdentity[ep.Identity()] = ep
		}
	}
	changed = changed || len(next.all) != len(old.all)
	if changed {
		next.version++
	}
	p.snapshot.Store(next)
	if changed {
		for _, fn := range p.onChange {
			fn()
		}
	}
	return changed
}

// Version counts membership changes; it is unchanged by health updates.
func (p *Pool) Version() uint64 { return p.snapshot.Load().version }

// Get returns the endpoint with the given ID, or nil.
func (p *Pool) Get(id string) *Endpoint { return p.snapshot.Load().byID[id] }

// ByIdentity returns the endpoint with the given identity (its URL, see
// Endpoint.Identity), or nil; of several, the first by ID.
func (p *Pool) ByIdentity(identity string) *Endpoint { return p.snapshot.Load().byIdentity[identity] }

// All returns every endpoint sorted by ID. The slice is shared: do not
// modify it.
func (p *Pool) All() []*Endpoint { return p.snapshot.Load().all }

// Available returns the endpoints that serve the phase of role (a mixed
// worker serves both) and may take new work, in ID order. The slice is
// fresh.
func (p *Pool) Available(role disagg.Role) []*Endpoint {
	var out []*Endpoint
	for _, ep := range p.snapshot.Load().all {
		if ep.Available() && serves(ep.Role, role) {
			out = append(out, ep)
		}
	}
	return out
}

// MaxModelLen returns the smallest context length, in tokens, that the
// available workers (of any role) reported; 0 when none reported one. It
// takes no lock and allocates nothing: it reads the endpoints' atomics
// from the current snapshot, so it is cheap enough for every request.
func (p *Pool) MaxModelLen() int {
	n := 0
	for _, ep := range p.snapshot.Load().all {
		if l := ep.MaxModelLen(); l > 0 && (n == 0 || l < n) && ep.Available() {
			n = l
		}
	}
	return n
}

// serves reports whether a worker of role have serves the phase want.
func serves(have, want disagg.Role) bool {
	switch want {
	case disagg.RoleContext:
		return have.ServesContext()
	case disagg.RoleGeneration:
		return have.ServesGeneration()
	default:
		return have == want
	}
}
