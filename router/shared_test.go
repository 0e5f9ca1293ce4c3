package router

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/stretchr/testify/require"
)

// memStore is an in-memory SharedState with the Redis store's lookup rules
// (router/redisstore is tested against a real Redis); down makes every call
// fail.
type memStore struct {
	mu    sync.Mutex
	recs  map[string]SessionRecord
	down  bool
	slow  bool // calls fail, but the store is not known to be down
	finds int
	// clocks are the workers' cache clocks by identity, summed over the
	// replicas (syncClocks).
	clocks map[string]int64
}

func newMemStore() *memStore {
	return &memStore{recs: map[string]SessionRecord{}, clocks: map[string]int64{}}
}

// syncClocks does what the Redis store's syncs do with the replicas' cache
// clocks, as if every replica synced twice: each adds what it booked to
// the total, and then reads the total.
func (m *memStore) syncClocks(rs ...*Router) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rs {
		for _, ep := range r.pool.All() {
			m.clocks[ep.Identity()] += ep.TakeCacheTouches()
		}
	}
	for _, r := range rs {
		for _, ep := range r.pool.All() {
			ep.CacheTouchesSynced(m.clocks[ep.Identity()])
		}
	}
}

func (m *memStore) Find(key string, ends []uint64) ([]SessionRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finds++
	if m.down {
		return nil, ErrStoreDown
	}
	if m.slow {
		return nil, errors.New("i/o timeout")
	}
	if key != "" {
		if r, ok := m.recs[key]; ok {
			return []SessionRecord{r}, nil
		}
		return nil, nil
	}
	var out []SessionRecord
	for _, e := range ends {
		for _, r := range m.recs {
			if r.End == e {
				out = append(out, r)
			}
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	return nil, nil
}

func (m *memStore) Save(r SessionRecord) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.down {
		m.recs[r.Key] = r
	}
}

func (m *memStore) setDown(d bool) { m.mu.Lock(); m.down = d; m.mu.Unlock() }
func (m *memStore) setSlow(s bool) { m.mu.Lock(); m.slow = s; m.mu.Unlock() }

// replicas returns n conversation routers, each over its own pool of the
// same workers (listed in a different order and with other names, as
// replicas' configs may), sharing store.
func replicas(t *testing.T, n int, store SharedState) []*Router {
	out := make([]*Router, n)
	for i := range out {
		p := NewPool()
		var ms []Member
		for w := 0; w < 3; w++ {
			k := (w + i) % 3 // another order, other IDs, same URLs
			ms = append(ms,
				Member{ID: fmt.Sprintf("r%d-ctx-%d", i, k), URL: fmt.Sprint("http://c", k), Role: disagg.RoleContext, Healthy: true},
				Member{ID: fmt.Sprintf("r%d-gen-%d", i, k), URL: fmt.Sprint("http://g", k), Role: disagg.RoleGeneration, Healthy: true})
		}
		p.Sync(ms)
		r, _ := convRouter(t, p, nil)
		r.ShareState(store)
		out[i] = r
	}
	return out
}

// urls names a pair by its workers' identities.
func urls(p *Pair) string { return p.Ctx.Endpoint().Identity() + "/" + p.Gen.Endpoint().Identity() }

func TestSharedSessionFollowsItsTurnsAcrossReplicas(t *testing.T) {
	rs := replicas(t, 3, newMemStore())
	// Load differs per replica, so each would place a new session elsewhere.
	for i, r := range rs {
		for j := 0; j < i; j++ {
			route(t, r, req(fmt.Sprint("warm", i, j), tokens(5000+100*j, 40)))
		}
	}
	first := route(t, rs[0], req("conv", tokens(0, 20)))
	for turn := 1; turn < 9; turn++ {
		p := route(t, rs[turn%3], req("conv", tokens(0, 20+8*turn)))
		require.Equal(t, DecisionSticky, p.Decision, "turn %d", turn)
		require.Equal(t, urls(first), urls(p), "turn %d", turn)
		require.Equal(t, fullBlocks(20+8*(turn-1), 4), p.CtxCached, "the held tokens travel with the session")
	}
}

func TestSharedImplicitContinuationAcrossReplicas(t *testing.T) {
	rs := replicas(t, 2, newMemStore())
	first := route(t, rs[0], req("", tokens(0, 22)))
	require.True(t, first.Minted)
	second := route(t, rs[1], req("", tokens(0, 30)))
	require.Equal(t, DecisionImplicit, second.Decision, "a replica that never saw turn 1 recognises turn 2")
	require.Equal(t, first.Session, second.Session, "the minted id is valid on every replica")
	require.Equal(t, urls(first), urls(second))
	third := route(t, rs[0], req("", tokens(0, 41)))
	require.Equal(t, DecisionImplicit, third.Decision, "replica 0's own index is stale: the store's record wins")
	require.Equal(t, urls(first), urls(third))
}

func TestSharedSameFirstTurnIsNotAContinuation(t *testing.T) {
	rs := replicas(t, 2, newMemStore())
	route(t, rs[0], req("", tokens(0, 22)))
	route(t, rs[1], req("", tokens(0, 22)))
	p := route(t, rs[0], req("", tokens(0, 30)))
	require.Equal(t, DecisionNew, p.Decision, "two sessions share the prompt exactly: neither is continued")
}

func TestStoreDownPlacesSessionsByRendezvous(t *testing.T) {
	store := newMemStore()
	store.setDown(true)
	rs := replicas(t, 3, store)
	for i, r := range rs { // replicas see different gen loads (too small to spill)
		gens := r.Pool().Available(disagg.RoleGeneration)
		for j := 0; j <= i; j++ {
			l := gens[j].Acquire(int64(1000 * (i + 1)))
			defer l.Release()
		}
	}
	for s := 0; s < 20; s++ {
		key := fmt.Sprint("conv-", s)
		want := urls(route(t, rs[0], req(key, tokens(0, 10))))
		for _, r := range rs[1:] {
			require.Equal(t, want, urls(route(t, r, req(key, tokens(0, 10)))), "replicas agree without the store")
		}
	}
	require.Equal(t, uint64(20), rs[0].Stats().StoreFallbacks())
}

func TestStoreDownMovesAPinOnceAndBackUpSharesAgain(t *testing.T) {
	store := newMemStore()
	rs := replicas(t, 2, store)
	first := route(t, rs[0], req("conv", tokens(0, 10)))
	store.setDown(true)
	down := route(t, rs[0], req("conv", tokens(0, 14)))
	if urls(down) != urls(first) {
		require.Equal(t, uint64(1), breakCount(rs[0], reasonStoreDown))
	}
	require.Equal(t, urls(down), urls(route(t, rs[1], req("conv", tokens(0, 18)))))
	store.setDown(false)
	up := route(t, rs[1], req("conv", tokens(0, 22)))
	require.Equal(t, DecisionSticky, up.Decision)
	require.Equal(t, urls(first), urls(up), "the store's record wins again once it answers")
}

func TestSlowStoreKeepsTheLocalPin(t *testing.T) {
	store := newMemStore()
	rs := replicas(t, 1, store)
	first := route(t, rs[0], req("conv", tokens(0, 10)))
	store.setSlow(true)
	for i := 0; i < 5; i++ {
		p := route(t, rs[0], req("conv", tokens(0, 14+4*i)))
		require.Equal(t, DecisionSticky, p.Decision)
		require.Equal(t, urls(first), urls(p), "one slow call is no reason to move a session")
	}
	require.Equal(t, uint64(5), rs[0].Stats().StoreFallbacks())
	require.Zero(t, breakCount(rs[0], reasonStoreDown))
}

func TestSlowStoreDoesNotOverwriteWhatItCouldNotRead(t *testing.T) {
	store := newMemStore()
	rs := replicas(t, 2, store)
	first := route(t, rs[0], req("conv", tokens(0, 10)))
	store.setSlow(true)
	// Replica 1 never saw the session: it places it as new, on local state,
	// away from the pair's busy ctx worker.
	for _, ep := range rs[1].Pool().All() {
		if ep.Identity() == first.Ctx.Endpoint().Identity() {
			l := ep.Acquire(1000)
			defer l.Release()
		}
	}
	require.NotEqual(t, urls(first), urls(route(t, rs[1], req("conv", tokens(0, 14)))))
	store.setSlow(false)
	rec, _ := store.Find("conv", nil)
	require.Equal(t, first.Ctx.Endpoint().Identity(), rec[0].Ctx, "the record replica 1 could not read is left as it was")
	require.Equal(t, urls(first), urls(route(t, rs[0], req("conv", tokens(0, 18)))))
}

func TestStoredPinOfUnknownWorkerIsRepicked(t *testing.T) {
	store := newMemStore()
	rs := replicas(t, 1, store)
	store.Save(SessionRecord{Key: "conv", Ctx: "http://elsewhere", Gen: "http://g1", CtxHeld: 40, GenHeld: 40})
	p := route(t, rs[0], req("conv", tokens(0, 10)))
	require.Equal(t, DecisionRepin, p.Decision)
	require.Equal(t, "http://g1", p.Gen.Endpoint().Identity())
	require.Zero(t, p.CtxCached)
	rec, _ := store.Find("conv", nil)
	require.Equal(t, p.Ctx.Endpoint().Identity(), rec[0].Ctx, "the new pin is saved")
}

func TestSharedEndsAndContinuedRecord(t *testing.T) {
	hashes := []uint64{11, 12, 13}
	require.Equal(t, []uint64{13, 12, 11, rootEnd}, sharedEnds(hashes, 0))
	require.Equal(t, []uint64{13, 12}, sharedEnds(hashes, 1))
	long := make([]uint64, 3*maxSharedEnds)
	require.Len(t, sharedEnds(long, 0), maxSharedEnds)

	toks := tokens(0, 14) // 3 blocks of 4 and 2 more
	rq := req("", toks)
	at := func(key string, depth, tail int) SessionRecord {
		return endRecord(key, rq, depth, tail)
	}
	require.Equal(t, "b", continuedRecord([]SessionRecord{at("a", 2, 1), at("b", 3, 1)}, toks, rq.Hashes, 4).Key)
	require.Equal(t, "a", continuedRecord([]SessionRecord{at("a", 2, 3), at("b", 2, 1)}, toks, rq.Hashes, 4).Key)
	require.Nil(t, continuedRecord([]SessionRecord{at("a", 3, 2)}, toks, rq.Hashes, 4), "the whole prompt is not a continuation")
	require.Nil(t, continuedRecord([]SessionRecord{at("a", 3, 1), at("b", 3, 1)}, toks, rq.Hashes, 4), "ambiguous")
	bad := at("a", 3, 1)
	bad.TailHash++
	require.Nil(t, continuedRecord([]SessionRecord{bad}, toks, rq.Hashes, 4))
	bad = SessionRecord{Key: "a", EndDepth: 9}
	require.Nil(t, continuedRecord([]SessionRecord{bad}, toks, rq.Hashes, 4), "deeper than the prompt")
}

// endRecord is the record of a session whose previous prompt was the first
// depth blocks and tail tokens of rq's prompt.
func endRecord(key string, rq *Request, depth, tail int) SessionRecord {
	x := newPrefixIndex(4, 0, 0)
	s := &session{key: key}
	x.record(s, rq.Tokens[:depth*4+tail], rq.Hashes[:depth])
	return SessionRecord{Key: key, End: s.endHash, EndDepth: s.endDepth, TailLen: tail, TailHash: s.tailHash}
}

func TestRendezvousSpreadsKeys(t *testing.T) {
	eps := fleet(4, 0).All()
	seen := map[string]int{}
	for i := 0; i < 400; i++ {
		seen[rendezvous(fmt.Sprint("k", i), eps).ID]++
	}
	require.Len(t, seen, 4)
	for id, n := range seen {
		require.Greater(t, n, 50, id)
	}
	require.Equal(t, rendezvous("k", eps), rendezvous("k", []*Endpoint{eps[3], eps[1], eps[0], eps[2]}), "order does not matter")
	require.True(t, errors.Is(ErrStoreDown, ErrStoreDown))
}

// smallCacheReplicas are replicas whose router takes each ctx worker's
// cache for 40 tokens.
func smallCacheReplicas(t *testing.T, n int, store SharedState) []*Router {
	rs := replicas(t, n, store)
	for _, r := range rs {
		r.cfg.KVBlocksPerWorker = 10
		r.conv.cfg.KVBlocksPerWorker = 10
	}
	return rs
}

// Regression (review of issue 17): a session taken over from the store had
// no turnover mark on the replica, so once the replica had sent a cache's
// worth to the worker over its lifetime, every session arriving from
// another replica was presumed evicted and moved.
func TestSharedSessionTakenOverIsNotTurnedOver(t *testing.T) {
	store := newMemStore()
	rs := smallCacheReplicas(t, 2, store)
	for i := 0; i < 6; i++ { // replica 1 computes far more than a cache's worth on every worker
		route(t, rs[1], req(fmt.Sprint("warm", i), tokens(5000+100*i, 40)))
	}
	store.syncClocks(rs...)
	first := route(t, rs[0], req("conv", tokens(0, 20)))
	store.syncClocks(rs...)
	second := route(t, rs[1], req("conv", tokens(0, 28)))
	require.Equal(t, DecisionSticky, second.Decision)
	require.Equal(t, urls(first), urls(second))
	require.Equal(t, 20, second.CtxCached)
	require.Zero(t, breakCount(rs[1], reasonTurnover))
}

// Turnover counts every replica's traffic (bench-cluster found each replica
// counting only its own): a session whose ctx worker the replicas sent a
// cache's worth since its last turn is placed afresh, also on a replica
// that did not route that turn.
func TestSharedTurnoverCountsEveryReplicasTraffic(t *testing.T) {
	store := newMemStore()
	rs := smallCacheReplicas(t, 3, store)
	first := route(t, rs[0], req("conv", tokens(0, 20)))
	store.syncClocks(rs...)
	home := first.Ctx.Endpoint().Identity()
	for i := 1; i <= 2; i++ { // each of the others sends the worker 30 tokens: 60 in all
		busy := []*Lease{}
		for _, ep := range rs[i].pool.Available(disagg.RoleContext) {
			if ep.Identity() != home {
				busy = append(busy, ep.Acquire(1_000_000))
			}
		}
		require.Equal(t, home, route(t, rs[i], req(fmt.Sprint("other", i), tokens(5000*i, 30))).Ctx.Endpoint().Identity())
		for _, l := range busy {
			l.Release()
		}
	}
	store.syncClocks(rs...)
	next := route(t, rs[2], req("conv", tokens(0, 28))) // the session's mark comes with it
	require.Equal(t, uint64(1), breakCount(rs[2], reasonTurnover), "the 60 tokens since its mark count: %s", next.Decision)
}

// With the store down, a session with an id goes where rendezvous hashing
// puts it on every replica; a turnover must not move it elsewhere (the next
// turn would move it back).
func TestStoreDownKeepsRendezvousPinsOverTurnover(t *testing.T) {
	store := newMemStore()
	rs := replicas(t, 1, store)
	r := rs[0]
	r.cfg.KVBlocksPerWorker, r.conv.cfg.KVBlocksPerWorker = 1, 1 // 4 tokens: every turn turns over
	store.setDown(true)
	first := route(t, r, req("conv", tokens(0, 20)))
	for turn := 1; turn < 5; turn++ {
		route(t, r, req(fmt.Sprint("other", turn), tokens(1000*turn, 40)))
		p := route(t, r, req("conv", tokens(0, 20+4*turn)))
		require.Equal(t, urls(first), urls(p), "turn %d", turn)
	}
	require.Zero(t, breakCount(r, reasonTurnover))
	require.Zero(t, breakCount(r, reasonStoreDown))
}
