package redisstore

import (
	"context"
	"errors"
	"fmt"
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
	r := &replica{pool: router.NewPool()}
	r.pool.Sync([]router.Member{
		{ID: "ctx-0", URL: "http://127.0.0.1:9100", Role: disagg.RoleContext, Healthy: true},
		{ID: "gen-0", URL: "http://127.0.0.1:9200/", Role: disagg.RoleGeneration, Healthy: true},
	})
	cfg := Defaults()
	cfg.State, cfg.Redis.Address, cfg.Redis.Timeout = StateRedis, addr, time.Second
	s, err := New(cfg, r.pool, Options{SessionTTL: ttl,
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
	r.store.writeBatch(context.Background(), recs)
}

func TestFindBySessionKeyAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	b.syncNow()
	rec := router.SessionRecord{Key: "conv-1", Ctx: "http://127.0.0.1:9100", Gen: "http://127.0.0.1:9200",
		CtxHeld: 4096, GenHeld: 4200, End: 0xfeedface, EndDepth: 128, TailLen: 7, TailHash: 0xabc}
	a.saveNow(rec)

	got, err := b.store.Find("conv-1", nil)
	require.NoError(t, err)
	require.Equal(t, []router.SessionRecord{rec}, got)

	got, err = b.store.Find("conv-unknown", nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestFindByPromptEnd(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	b.syncNow()
	first := router.SessionRecord{Key: "s1", Ctx: "c", Gen: "g", End: 11, EndDepth: 3, TailLen: 5, TailHash: 1}
	a.saveNow(first)

	got, err := b.store.Find("", []uint64{40, 30, 11, 0})
	require.NoError(t, err)
	require.Equal(t, []router.SessionRecord{first}, got)

	// The session's next turn ends elsewhere: the old end no longer names it.
	next := first
	next.End, next.EndDepth = 40, 9
	a.saveNow(next)
	got, err = b.store.Find("", []uint64{11})
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = b.store.Find("", []uint64{50, 40, 11})
	require.NoError(t, err)
	require.Equal(t, []router.SessionRecord{next}, got)
}

func TestFindReturnsTheFirstEndsWithSessions(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	for i, end := range []uint64{30, 20, 10} {
		a.saveNow(router.SessionRecord{Key: fmt.Sprint("s", i), End: end, EndDepth: int(end)})
	}
	got, err := a.store.Find("", []uint64{99, 30, 20, 10})
	require.NoError(t, err)
	require.Len(t, got, maxMatchEnds)
	require.Equal(t, []string{"s0", "s1"}, []string{got[0].Key, got[1].Key})
}

func TestCommonPrefixEndIsSkippedAndBounded(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	for i := 0; i < 3*maxPerEnd; i++ {
		a.saveNow(router.SessionRecord{Key: fmt.Sprint("s", i), End: 7, EndDepth: 1})
	}
	got, err := a.store.Find("", []uint64{7})
	require.NoError(t, err)
	require.Empty(t, got, "an end shared by more than %d sessions is a common prefix", maxPerEnd)
	n, err := a.store.client.ZCard(context.Background(), a.store.prefix+"px:"+endKey(7)).Result()
	require.NoError(t, err)
	require.Equal(t, int64(maxPerEnd+1), n, "the index of a common prefix stops growing")
}

func TestExpiredSessionsAreForgotten(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), 50*time.Millisecond)
	a.syncNow()
	a.saveNow(router.SessionRecord{Key: "s", End: 5, EndDepth: 1})
	time.Sleep(150 * time.Millisecond) // past the TTL: Redis expires it whatever the load
	got, err := a.store.Find("s", nil)
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = a.store.Find("", []uint64{5})
	require.NoError(t, err)
	require.Empty(t, got)
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
	_, err := b.store.Find("any", nil)
	require.NoError(t, err)
	require.Equal(t, int64(70), b.pool.Get("ctx-0").Load(), "the routing call brings the others' load")
}

// Every replica reads the ctx workers' cache clocks as the sum of all
// replicas' bookings; gen workers have none.
func TestCacheClocksAreSharedAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.pool.Get("ctx-0").TouchCache(100)
	b.pool.Get("ctx-0").TouchCache(30)
	a.syncNow()
	b.syncNow()
	require.Equal(t, int64(130), b.pool.Get("ctx-0").CacheClock())
	require.Equal(t, int64(100), a.pool.Get("ctx-0").CacheClock(), "a has not synced since b booked")
	a.syncNow()
	require.Equal(t, int64(130), a.pool.Get("ctx-0").CacheClock())
	a.syncNow()
	require.Equal(t, int64(130), a.pool.Get("ctx-0").CacheClock(), "each booking is added once")

	keys, err := a.store.client.Keys(context.Background(), "duet:clock:*").Result()
	require.NoError(t, err)
	require.Equal(t, []string{"duet:clock:http://127.0.0.1:9100"}, keys, "only ctx workers have clocks")
	ttl, err := a.store.client.PTTL(context.Background(), keys[0]).Result()
	require.NoError(t, err)
	require.InDelta(t, time.Minute.Seconds(), ttl.Seconds(), 5, "a clock outlives its worker by a session TTL")
}

// While Redis is down a replica's clock counts its own bookings, which
// reach the store once it is back; a store that lost its count (restarted
// empty) never sets a clock back.
func TestCacheClockAcrossAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	b.pool.Get("ctx-0").TouchCache(1000)
	b.syncNow()
	a.syncNow()
	ctx := a.pool.Get("ctx-0")
	require.Equal(t, int64(1000), ctx.CacheClock())

	srv.Stop()
	ctx.TouchCache(50)
	a.syncNow() // fails: the 50 stay to be sent
	require.False(t, a.store.Up())
	require.Equal(t, int64(1050), ctx.CacheClock())

	srv.Restart() // empty
	a.syncNow()
	require.True(t, a.store.Up())
	require.Equal(t, int64(1050), ctx.CacheClock(), "the 50 counted once, the lost 1000 still")
	total, err := a.store.client.Get(context.Background(), "duet:clock:http://127.0.0.1:9100").Int64()
	require.NoError(t, err)
	require.Equal(t, int64(50), total, "sent after the outage")
	b.pool.Get("ctx-0").TouchCache(7)
	b.syncNow()
	a.syncNow()
	require.Equal(t, int64(1057), ctx.CacheClock())
}

func TestLoadChangeIsSignalled(t *testing.T) {
	p := newReplica(t, "127.0.0.1:1", time.Minute).pool
	l := p.Get("ctx-0").Acquire(1)
	<-p.LoadChanged()
	l.Release()
	<-p.LoadChanged()
	select {
	case <-p.LoadChanged():
		t.Fatal("one signal per change at most")
	default:
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
	_, err := a.store.Find("s", nil)
	require.ErrorIs(t, err, router.ErrStoreDown, "not up before the first sync")
	l := b.pool.Get("ctx-0").Acquire(100)
	defer l.Release()
	b.syncNow()
	a.syncNow()
	require.True(t, a.store.Up())
	require.Equal(t, int64(100), a.pool.Get("ctx-0").Load())

	srv.Stop()
	_, err = a.store.Find("s", nil)
	require.Error(t, err)
	require.False(t, a.store.Up())
	require.Equal(t, int64(0), a.pool.Get("ctx-0").Load(), "the others' load is forgotten while the store is down")
	_, err = a.store.Find("s", nil)
	require.ErrorIs(t, err, router.ErrStoreDown, "no call while down")
	a.saveNow(router.SessionRecord{Key: "lost"})
	require.Equal(t, uint64(1), a.store.DroppedSaves())
	a.syncNow() // a reconnect attempt that fails
	require.False(t, a.store.Up())

	srv.Restart() // empty: the scripts must be loaded again
	a.syncNow()
	require.True(t, a.store.Up())
	a.saveNow(router.SessionRecord{Key: "back", Ctx: "c"})
	got, err := a.store.Find("back", nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
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
		_, err := a.store.Find("s", nil)
		require.Error(t, err)
		require.False(t, errors.Is(err, router.ErrStoreDown), "call %d: a slow call is not an outage", i)
		require.True(t, a.store.Up())
	}
	_, err := a.store.Find("s", nil)
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
	rec := router.SessionRecord{Key: "k", Ctx: "http://a:1", Gen: "", CtxHeld: 1, CtxMark: 1 << 40, GenHeld: 2,
		End: 1<<64 - 1, EndDepth: 3, TailLen: 31, TailHash: 42}
	got, err := decodeRecord("k", encodeRecord(rec))
	require.NoError(t, err)
	require.Equal(t, rec, got)
	got, err = decodeRecord("k", "1\nhttp://a:1\n\n1\n2\nffffffffffffffff\n3\n31\n2a") // an older duet's
	require.NoError(t, err)
	rec.CtxMark = 0 // unknown
	require.Equal(t, rec, got)
	for _, bad := range []string{"", "3\na\nb\n1\n2\n3\n4\n5\n6\n7", "2\na\nb\n1\n2\n3\n4\n5\n6",
		"1\na\nb\n1\n2\n3\n4\n5\n6\n7", "2\na\nb\n1\n2\n3\n4\n5\n6\nx",
		"1\na\nb\nx\n2\n3\n4\n5\n6", "1\na\nb\n1\n2\n3\n4\n5"} {
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
// by key, and a 4k-token prompt's 128 ends without a match (a new
// conversation: the costliest lookup).
func BenchmarkFind(b *testing.B) {
	srv := redistest.Start(b)
	r := newReplica(b, srv.Addr(), time.Minute)
	r.syncNow()
	r.saveNow(router.SessionRecord{Key: "conv", Ctx: "http://127.0.0.1:9100", Gen: "http://127.0.0.1:9200", End: 1, EndDepth: 1})
	ends := make([]uint64, 128)
	for i := range ends {
		ends[i] = uint64(1000 + i)
	}
	b.Run("key", func(b *testing.B) {
		for b.Loop() {
			if _, err := r.store.Find("conv", nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("prefix-miss-128", func(b *testing.B) {
		for b.Loop() {
			if _, err := r.store.Find("", ends); err != nil {
				b.Fatal(err)
			}
		}
	})
}
