package redisstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/router/redisstore/redistest"
	"github.com/stretchr/testify/require"
)

// replica is one store over its own pool of the same two workers, as one
// duet replica has.
type replica struct {
	store  *Store
	pool   *router.Pool
	states []bool
	mu     sync.Mutex
	seen   [][]WorkerChange
}

func newReplica(t testing.TB, addr string, ttl time.Duration) *replica {
	t.Helper()
	return newReplicaIn(t, addr, ttl, "")
}

// newScopedReplica is a replica of another model: its router state is in
// scope.
func newScopedReplica(t testing.TB, addr, scope string) *replica {
	t.Helper()
	return newReplicaIn(t, addr, time.Minute, scope)
}

func newReplicaIn(t testing.TB, addr string, ttl time.Duration, scope string) *replica {
	t.Helper()
	r := &replica{pool: router.NewPool()}
	r.pool.Sync([]router.Member{
		{ID: "ctx-0", URL: "http://127.0.0.1:9100", Role: disagg.RoleContext, Healthy: true},
		{ID: "gen-0", URL: "http://127.0.0.1:9200/", Role: disagg.RoleGeneration, Healthy: true},
	})
	cfg := Defaults()
	cfg.State, cfg.Redis.Address, cfg.Redis.Timeout = StateRedis, addr, time.Second
	s, err := New(cfg, r.pool, Options{SessionTTL: ttl, Scope: scope,
		OnState: func(up bool, err error) {
			t.Log("state", up, err)
			r.mu.Lock()
			r.states = append(r.states, up)
			r.mu.Unlock()
		},
		OnWorkers: func(c []WorkerChange) { r.mu.Lock(); r.seen = append(r.seen, c); r.mu.Unlock() }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.client.Close() })
	r.store = s
	return r
}

// syncNow runs one load exchange, as Run does every load_interval.
func (r *replica) syncNow() { r.store.sync(context.Background()) }

// saveNow writes records the way Run's writer does.
func (r *replica) saveNow(recs ...router.SessionRecord) {
	var ws []write
	for _, rec := range recs {
		ws = append(ws, write{rec: &rec})
	}
	r.store.writeBatch(context.Background(), ws)
}

func TestFindBySessionKeyAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	b.syncNow()
	rec := router.SessionRecord{Key: "conv-1", Ctx: "http://127.0.0.1:9100", Gen: "http://127.0.0.1:9200"}
	a.saveNow(rec)

	got, ok, err := b.store.Find("conv-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, rec, got)

	_, ok, err = b.store.Find("conv-unknown")
	require.NoError(t, err)
	require.False(t, ok)
}

func TestExpiredSessionsAreForgotten(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), 50*time.Millisecond)
	a.syncNow()
	a.saveNow(router.SessionRecord{Key: "s", Ctx: "c"})
	time.Sleep(150 * time.Millisecond) // past the TTL: Redis expires it whatever the load
	_, ok, err := a.store.Find("s")
	require.NoError(t, err)
	require.False(t, ok)
}

func TestLoadIsSummedOverLiveReplicas(t *testing.T) {
	srv := redistest.Start(t)
	a, b, c := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	la := a.pool.Get("ctx-0").Acquire(100)
	defer la.Release()
	lb := b.pool.Get("gen-0").Acquire(30)
	defer lb.Release()
	a.syncNow()
	b.syncNow()
	c.syncNow()

	require.Equal(t, int64(100), c.pool.Get("ctx-0").Load())
	require.Equal(t, int64(30), c.pool.Get("gen-0").Load(), "identities ignore a trailing slash")
	require.Equal(t, int64(3), c.store.Replicas())
	a.syncNow()
	require.Equal(t, int64(100), a.pool.Get("ctx-0").Load(), "a replica counts its own load once")
	require.Equal(t, int64(100), a.pool.Get("ctx-0").LocalLoad())
	require.Equal(t, int64(30), a.pool.Get("gen-0").Load())

	la.Release()
	a.syncNow()
	c.syncNow()
	require.Equal(t, int64(0), c.pool.Get("ctx-0").Load(), "a released lease leaves the sum")
}

func TestFindReadsTheOthersLoad(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	b.syncNow()
	l := a.pool.Get("ctx-0").Acquire(70)
	defer l.Release()
	a.syncNow() // a publishes; b has not synced since
	require.Zero(t, b.pool.Get("ctx-0").Load())
	_, _, err := b.store.Find("any")
	require.NoError(t, err)
	require.Equal(t, int64(70), b.pool.Get("ctx-0").Load(), "the routing call brings the others' load")
}

// What one replica's requests left in a worker's cache reaches the
// others' estimates.
func TestLearnedBlocksReachTheOtherReplicas(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	b.syncNow()
	type learned struct {
		identities []string
		hashes     []uint64
	}
	got := make(chan learned, 16)
	b.store.OnLearned(func(identities []string, hashes []uint64) { got <- learned{identities, hashes} })
	a.store.OnLearned(func([]string, []uint64) { t.Error("a replica hears its own messages") })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range []*replica{a, b} {
		wg.Add(1)
		sub := r.store.subscribe(ctx)
		go func() { defer wg.Done(); r.store.listen(ctx, sub) }()
	}
	defer func() { cancel(); wg.Wait() }()
	want := learned{[]string{"http://127.0.0.1:9100", "http://127.0.0.1:9200"}, []uint64{1, 1 << 63, 42}}
	require.Eventually(t, func() bool { // until b's subscription is in place
		a.store.writeBatch(context.Background(), []write{{identities: want.identities, hashes: want.hashes}})
		select {
		case g := <-got:
			require.Equal(t, want, g)
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	}, 10*time.Second, time.Millisecond)
}

func TestLearnedMessageRoundTrip(t *testing.T) {
	r, ids, hs, err := decodeLearned(encodeLearned("r1", []string{"http://w:1", "http://w:2"}, []uint64{7, 0, 1<<64 - 1}))
	require.NoError(t, err)
	require.Equal(t, "r1", r)
	require.Equal(t, []string{"http://w:1", "http://w:2"}, ids)
	require.Equal(t, []uint64{7, 0, 1<<64 - 1}, hs)
	for _, bad := range []string{"", "r1", "r1\x00", "r1\x00\x00", "r1\x00id\x00abc"} {
		_, _, _, err := decodeLearned(bad)
		require.Error(t, err, bad)
	}
}

func TestSilentReplicaDropsOut(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.store.cfg.LoadTTL, b.store.cfg.LoadTTL = 100*time.Millisecond, 100*time.Millisecond
	l := a.pool.Get("ctx-0").Acquire(100)
	defer l.Release()
	a.syncNow()
	b.syncNow()
	require.Equal(t, int64(100), b.pool.Get("ctx-0").Load())
	time.Sleep(250 * time.Millisecond) // a publishes no more
	b.syncNow()
	require.Equal(t, int64(0), b.pool.Get("ctx-0").Load())
	require.Equal(t, int64(1), b.store.Replicas())
}

func TestStoreDownAndBack(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	_, _, err := a.store.Find("s")
	require.ErrorIs(t, err, router.ErrStoreDown, "not up before the first sync")
	l := b.pool.Get("ctx-0").Acquire(100)
	defer l.Release()
	b.syncNow()
	a.syncNow()
	require.True(t, a.store.Up())
	require.Equal(t, int64(100), a.pool.Get("ctx-0").Load())

	srv.Stop()
	_, _, err = a.store.Find("s")
	require.Error(t, err)
	require.False(t, a.store.Up())
	require.Equal(t, int64(0), a.pool.Get("ctx-0").Load(), "the others' load is forgotten while the store is down")
	_, _, err = a.store.Find("s")
	require.ErrorIs(t, err, router.ErrStoreDown, "no call while down")
	a.saveNow(router.SessionRecord{Key: "lost"})
	require.Equal(t, uint64(1), a.store.DroppedSaves())
	a.syncNow() // a reconnect attempt that fails
	require.False(t, a.store.Up())

	srv.Restart() // empty: the scripts must be loaded again
	a.syncNow()
	require.True(t, a.store.Up())
	a.saveNow(router.SessionRecord{Key: "back", Ctx: "c"})
	got, ok, err := a.store.Find("back")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "c", got.Ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	require.Equal(t, []bool{true, false, true}, a.states, "one report per change")
}

func TestSlowCallsMarkTheStoreDownOnlyInARow(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	a.store.cfg.Redis.Timeout = 30 * time.Millisecond
	stall := newReplica(t, srv.Addr(), time.Minute).store.client
	blocked := make(chan error, 1)
	go func() { blocked <- stall.Do(context.Background(), "DEBUG", "SLEEP", "0.5").Err() }()
	time.Sleep(100 * time.Millisecond) // the server is asleep
	for i := 1; i < downAfter; i++ {
		_, _, err := a.store.Find("s")
		require.Error(t, err)
		require.False(t, errors.Is(err, router.ErrStoreDown), "call %d: a slow call is not an outage", i)
		require.True(t, a.store.Up())
	}
	_, _, err := a.store.Find("s")
	require.Error(t, err)
	require.False(t, a.store.Up(), "%d slow calls in a row are", downAfter)
	require.NoError(t, <-blocked)
	a.syncNow()
	require.True(t, a.store.Up())
}

func TestWorkerChangesReachEveryReplica(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	b.syncNow()
	change := WorkerChange{Op: OpRemove, ID: "ctx-0", URL: "http://127.0.0.1:9100", Role: disagg.RoleContext}
	require.NoError(t, a.store.PublishWorker(context.Background(), change))
	b.syncNow()
	b.syncNow() // unchanged: not delivered again
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Equal(t, [][]WorkerChange{{}, {change}}, b.seen)
}

func TestPublishWorkerWhileDown(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), time.Minute)
	err := a.store.PublishWorker(context.Background(), WorkerChange{Op: OpDrain, URL: "http://x:1"})
	require.True(t, errors.Is(err, ErrNotShared))
}

func TestRecordRoundTrip(t *testing.T) {
	rec := router.SessionRecord{Key: "k", Ctx: "http://a:1", Gen: ""}
	got, err := decodeRecord("k", encodeRecord(rec))
	require.NoError(t, err)
	require.Equal(t, rec, got)
	for _, bad := range []string{"", "3\na", "3\na\nb\nc", "2\na\nb\n1\n2\n3\n4\n5\n6\n7", // an older duet's
		"1\na\nb\n1\n2\n3\n4\n5\n6"} {
		_, err := decodeRecord("k", bad)
		require.Error(t, err, bad)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for key, mutate := range map[string]func(*Config){
		"state: must be local or redis":    func(c *Config) { c.State = "etcd" },
		"load_ttl":                         func(c *Config) { c.LoadTTL = c.LoadInterval },
		"redis.address: must be host:port": func(c *Config) { c.Redis.Address = "localhost" },
		"redis.timeout":                    func(c *Config) { c.Redis.Timeout = 0 },
		"redis.key_prefix":                 func(c *Config) { c.Redis.KeyPrefix = "" },
		"redis.pool_size":                  func(c *Config) { c.Redis.PoolSize = 0 },
	} {
		cfg := Defaults()
		mutate(&cfg)
		require.ErrorContains(t, cfg.Validate(), key)
	}
	require.NoError(t, Defaults().Validate())
}

// BenchmarkFind is one routing-path call against a real Redis: a session
// by key.
func BenchmarkFind(b *testing.B) {
	srv := redistest.Start(b)
	r := newReplica(b, srv.Addr(), time.Minute)
	r.syncNow()
	r.saveNow(router.SessionRecord{Key: "conv", Ctx: "http://127.0.0.1:9100", Gen: "http://127.0.0.1:9200"})
	b.Run("key", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := r.store.Find("conv"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A routing call takes the writes queued meanwhile along: one round trip.
func TestFindCarriesQueuedWrites(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	b.syncNow()
	a.store.Ended(router.Turn{Session: &router.SessionRecord{Key: "carried", Ctx: "http://127.0.0.1:9100"}}) // no writer runs: only a find sends it
	before := a.store.RoundTrips()
	_, ok, err := a.store.Find("other")
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, before+1, a.store.RoundTrips())
	rec, ok, err := b.store.Find("carried")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "http://127.0.0.1:9100", rec.Ctx)
}

// A turn whose session's pins changed is written before Ended returns.
func TestEndedWithWaitWritesAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	b.syncNow()
	a.store.Ended(router.Turn{Session: &router.SessionRecord{Key: "moved", Ctx: "http://127.0.0.1:9100", Gen: "http://127.0.0.1:9200"},
		Workers: []string{"http://127.0.0.1:9100"}, Blocks: []uint64{7}, Wait: true}) // no writer runs
	rec, ok, err := b.store.Find("moved")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "http://127.0.0.1:9200", rec.Gen)
}

// A session its client ended is deleted for every replica.
func TestEndedSessionIsDeleted(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	b.syncNow()
	a.store.Ended(router.Turn{Session: &router.SessionRecord{Key: "task", Ctx: "http://127.0.0.1:9100"}, Wait: true})
	_, ok, err := b.store.Find("task")
	require.NoError(t, err)
	require.True(t, ok)
	a.store.Ended(router.Turn{Forget: "task", Wait: true})
	_, ok, err = b.store.Find("task")
	require.NoError(t, err)
	require.False(t, ok, "gone for the other replica too")
}
