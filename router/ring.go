package router

import (
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/duet-serve/duet/proto/disagg"
)

// HashRing is consistent hashing with virtual nodes: a request's session key
// (or its request id) lands on a point of the ring and goes to the first
// worker clockwise that can take it, walking past at most Fallback
// unavailable ones. The ring holds every member of the pool, healthy or not,
// and is rebuilt only when membership changes. Points are placed by each
// worker's stable identity (Endpoint.Identity: its URL), never by its name
// or position, so several duet replicas with the same workers agree without
// sharing state, whatever order or names their configs give the workers.
type HashRing struct {
	pool     *Pool
	vnodes   int
	fallback int

	// mu guards the rings and the pool version they were built from.
	mu      sync.Mutex
	version uint64
	built   bool
	ctx     *ring
	gen     *ring
}

var _ picker = (*HashRing)(nil)

func newHashRing(pool *Pool, vnodes, fallback int) *HashRing {
	return &HashRing{pool: pool, vnodes: vnodes, fallback: fallback}
}

// ring is one phase's sorted points and their owners.
type ring struct {
	points []uint64
	owners []string
}

func buildRing(eps []*Endpoint, vnodes int) *ring {
	r := &ring{}
	type point struct {
		h     uint64
		owner string
	}
	pts := make([]point, 0, len(eps)*vnodes)
	for _, ep := range eps {
		for i := 0; i < vnodes; i++ {
			pts = append(pts, point{xxhash.Sum64String(ep.Identity() + "#" + strconv.Itoa(i)), ep.ID})
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].h < pts[j].h })
	for _, p := range pts {
		r.points = append(r.points, p.h)
		r.owners = append(r.owners, p.owner)
	}
	return r
}

// walk returns up to n distinct owners clockwise from key's point.
func (r *ring) walk(key string, n int) []string {
	if len(r.points) == 0 {
		return nil
	}
	h := xxhash.Sum64String(key)
	i := sort.Search(len(r.points), func(i int) bool { return r.points[i] >= h })
	var out []string
	for step := 0; step < len(r.points) && len(out) < n; step++ {
		owner := r.owners[(i+step)%len(r.points)]
		if !slices.Contains(out, owner) {
			out = append(out, owner)
		}
	}
	return out
}

// rings returns the current rings, rebuilding them after a membership change.
func (h *HashRing) rings() (*ring, *ring) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v := h.pool.Version(); !h.built || v != h.version {
		var ctx, gen []*Endpoint
		for _, ep := range h.pool.All() {
			if ep.Role.ServesContext() {
				ctx = append(ctx, ep)
			}
			if ep.Role.ServesGeneration() {
				gen = append(gen, ep)
			}
		}
		h.ctx, h.gen, h.version, h.built = buildRing(ctx, h.vnodes), buildRing(gen, h.vnodes), v, true
	}
	return h.ctx, h.gen
}

func (h *HashRing) pick(req *Request, ctxCands, genCands []*Endpoint) choice {
	key := req.SessionKey
	if key == "" {
		key = req.RequestID
	}
	ctxRing, genRing := h.rings()
	ctx, ctxFell := h.first(ctxRing, key, ctxCands)
	gen, genFell := h.first(genRing, key, otherThan(genCands, ctx))
	ch := choice{ctx: ctx, gen: gen, decision: DecisionHash, session: req.SessionKey}
	if ctxFell || genFell {
		ch.decision = DecisionFallback
	}
	return ch.charge(req)
}

// first returns the first available worker clockwise within the fallback
// walk; beyond it, the least-loaded candidate (fell is true either way when
// the ring's own choice was unavailable).
func (h *HashRing) first(r *ring, key string, cands []*Endpoint) (*Endpoint, bool) {
	for i, id := range r.walk(key, h.fallback+1) {
		if ep := find(cands, id); ep != nil {
			return ep, i > 0
		}
	}
	return leastLoaded(cands, xxhash.Sum64String(key)), true
}

// owners is for tests: the first owner of key on each ring.
func (h *HashRing) owner(role disagg.Role, key string) string {
	ctx, gen := h.rings()
	r := ctx
	if role == disagg.RoleGeneration {
		r = gen
	}
	if w := r.walk(key, 1); len(w) == 1 {
		return w[0]
	}
	return ""
}
