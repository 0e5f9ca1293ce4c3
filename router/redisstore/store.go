// Package redisstore keeps the router state several duet replicas share on
// Redis: sessions and the prefix index of conversations (router.SharedState),
// each replica's load per worker, and admin changes to the worker set. The
// store is never a way for a request to fail: every call has a tight
// deadline, and while Redis is slow or down the replicas route on local
// state (and rendezvous hashing) and reconnect on their own.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duet-serve/duet/router"
	"github.com/redis/go-redis/v9"
)

// Queue bounds.
const (
	// saveQueue bounds the saves waiting for the writer; beyond it they are
	// dropped (and counted).
	saveQueue = 4096
	// saveBatch is how many saves one pipelined round trip carries.
	saveBatch = 128
)

// Options are the store's hooks into the process that runs it.
type Options struct {
	// SessionTTL is how long a session outlives its last save (the
	// router's session_ttl).
	SessionTTL time.Duration
	// Scope follows the key prefix in every key of the router's state
	// (sessions, load, learned blocks, admin changes): one duet serving
	// several models keeps each model's apart ("" for one model). Tenant
	// limits (limits.go) are not scoped: every model shares them.
	Scope string
	// OnState is called once per change between reachable (up) and not,
	// with the error that brought it down; nil to ignore.
	OnState func(up bool, err error)
	// ObserveFind is called with the duration of every Find that reached
	// Redis; nil to ignore.
	ObserveFind func(time.Duration)
	// OnWorkers is called with the admin changes to the worker set when
	// they differ from the last call (and on the first sync); nil to
	// ignore.
	OnWorkers func([]WorkerChange)
}

// Store is router state on Redis. Create it with New, start it with Run.
type Store struct {
	cfg    Config
	opts   Options
	pool   *router.Pool
	client *redis.Client
	prefix string // of the router state's keys: key_prefix + Options.Scope
	// limitPrefix is the tenant limits' key prefix: key_prefix.
	limitPrefix string
	replica     string

	up        atomic.Bool
	failures  atomic.Int32 // calls failed in a row
	stateMu   sync.Mutex   // serialises up/down changes and their OnState calls
	writes    chan write
	onLearned atomic.Pointer[func(identities []string, hashes []uint64)]
	dropped   atomic.Uint64
	roundTrip atomic.Uint64
	// syncs counts the round trips that were Run's own load syncs (and
	// reconnection attempts): the heartbeat, not caused by requests.
	syncs    atomic.Uint64
	replicas atomic.Int64
	// lastSync is when a sync last succeeded (unix nanoseconds): Run's own,
	// or one a write batch carried.
	lastSync atomic.Int64
	// applyMu serialises applying sync replies (Run's and the writer's) and
	// guards workers and delivered: the workers hash as last delivered to
	// OnWorkers (delivered: once at least).
	applyMu   sync.Mutex
	workers   string
	delivered bool
}

var _ router.SharedState = (*Store)(nil)

// New returns a store for cfg (state: redis) that shares load over pool's
// workers. It does not connect: Run does, and until Redis answers, Find
// returns router.ErrStoreDown.
func New(cfg Config, pool *router.Pool, opts Options) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cluster.%w", err)
	}
	if opts.SessionTTL <= 0 {
		return nil, errors.New("redisstore: SessionTTL must be > 0")
	}
	quietClientLog.Do(func() { redis.SetLogger(discardLog{}) })
	r := cfg.Redis
	client := redis.NewClient(&redis.Options{Addr: r.Address, Password: r.Password, DB: r.DB,
		DialTimeout: r.DialTimeout, ReadTimeout: r.Timeout, WriteTimeout: r.Timeout, PoolSize: r.PoolSize,
		MaxRetries: -1, ContextTimeoutEnabled: true, DisableIdentity: true})
	return &Store{cfg: cfg, opts: opts, pool: pool, client: client, prefix: r.KeyPrefix + opts.Scope, limitPrefix: r.KeyPrefix, replica: replicaName(),
		writes: make(chan write, saveQueue)}, nil
}

// quietClientLog silences go-redis's own logger once per process: it
// would print every failed dial (one per load_interval while Redis is
// down); the store reports state changes once through Options.OnState.
var quietClientLog sync.Once

type discardLog struct{}

func (discardLog) Printf(context.Context, string, ...any) {}

// replicaName names this process among the replicas: host, pid and a
// random suffix (a restarted replica is a new one).
func replicaName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Up reports whether Redis answered the last call.
func (s *Store) Up() bool { return s.up.Load() }

// Replicas is the number of live replicas (this one included) as of the
// last sync; 0 while Redis is down.
func (s *Store) Replicas() int64 { return s.replicas.Load() }

// RoundTrips counts the calls made to Redis (each Find, each sync, each
// pipelined batch of writes, each admin change).
func (s *Store) RoundTrips() uint64 { return s.roundTrip.Load() }

// Syncs counts the round trips that were syncs of the replica's own, made
// after load_interval without a routing call or write batch (included in
// RoundTrips).
func (s *Store) Syncs() uint64 { return s.syncs.Load() }

// DroppedSaves counts the session saves and learned blocks dropped
// because Redis was down or the queue was full.
func (s *Store) DroppedSaves() uint64 { return s.dropped.Load() }

// Find implements router.SharedState: one script call bounded by the
// configured timeout.
func (s *Store) Find(key string) (router.SessionRecord, bool, error) {
	if !s.up.Load() {
		return router.SessionRecord{}, false, router.ErrStoreDown
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Redis.Timeout)
	defer cancel()
	args := s.syncArgs(s.pool.All())
	args = append(args[:4:4], append([]any{key}, args[4:]...)...) // the key before the load pairs
	start := time.Now()
	res, err := s.findWithWrites(ctx, args)
	if s.opts.ObserveFind != nil {
		s.opts.ObserveFind(time.Since(start))
	}
	if err != nil {
		return router.SessionRecord{}, false, err
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 2 {
		return router.SessionRecord{}, false, fmt.Errorf("redisstore: unexpected find reply %T", res)
	}
	if err := s.apply(parts[1]); err != nil {
		return router.SessionRecord{}, false, err
	}
	raw, _ := parts[0].(string)
	if raw == "" {
		return router.SessionRecord{}, false, nil
	}
	rec, err := decodeRecord(key, raw)
	if err != nil { // another duet version's record: route as new
		return router.SessionRecord{}, false, nil
	}
	return rec, true, nil
}

// findWithWrites runs the find script and, in the same round trip, the
// writes queued meanwhile (the writer sends them at once otherwise: a turn
// that follows at once through another replica must find them).
func (s *Store) findWithWrites(ctx context.Context, args []any) (any, error) {
	writes := s.drain(saveBatch)
	if len(writes) == 0 {
		return s.call(ctx, findScript, args)
	}
	pipe := s.client.Pipeline()
	found := findScript.EvalSha(ctx, pipe, nil, args...)
	s.queueWrites(ctx, pipe, writes)
	s.roundTrip.Add(1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		s.dropped.Add(uint64(len(writes)))
		s.failed(err)
		return nil, err
	}
	s.failures.Store(0)
	return found.Result()
}

// Ended implements router.SharedState: the turn is queued for the writer
// (Run), or with Wait written at once with whatever else is queued,
// bounded by the call's timeout.
func (s *Store) Ended(t router.Turn) {
	w := write{rec: t.Session, forget: t.Forget, identities: t.Workers, hashes: t.Blocks}
	if !t.Wait || !s.up.Load() {
		s.queue(w)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Redis.Timeout)
	defer cancel()
	pipe := s.client.Pipeline()
	s.queueWrites(ctx, pipe, append(s.drain(saveBatch-1), w))
	s.roundTrip.Add(1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		s.dropped.Add(1)
		s.failed(err)
		return
	}
	s.failures.Store(0)
}

// drain takes up to n queued writes, without waiting.
func (s *Store) drain(n int) []write {
	var out []write
	for len(out) < n && len(s.writes) > 0 {
		select {
		case w := <-s.writes:
			out = append(out, w)
		default:
		}
	}
	return out
}

// OnLearned implements router.SharedState.
func (s *Store) OnLearned(fn func(identities []string, hashes []uint64)) { s.onLearned.Store(&fn) }

// queue hands w to the writer, or drops it (counted) while Redis is down
// or the queue is full.
func (s *Store) queue(w write) {
	if !s.up.Load() {
		s.dropped.Add(1)
		return
	}
	select {
	case s.writes <- w:
	default:
		s.dropped.Add(1)
	}
}

// downAfter is how many calls in a row may fail (time out, mostly) before
// the store counts as down; a refused connection counts at once. One slow
// call routes one request on local state; a store that keeps failing is
// left alone until a sync reaches it again.
const downAfter = 3

// call runs a script and keeps the up/down state (see failed).
func (s *Store) call(ctx context.Context, script *redis.Script, args []any) (any, error) {
	s.roundTrip.Add(1)
	res, err := script.Run(ctx, s.client, nil, args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		s.failed(err)
		return nil, err
	}
	s.failures.Store(0)
	return res, nil
}

// failed counts a failed call and marks the store down after downAfter in
// a row, or at once when Redis refused the connection.
func (s *Store) failed(err error) {
	var op *net.OpError
	if s.failures.Add(1) >= downAfter || (errors.As(err, &op) && op.Op == "dial") {
		s.setUp(false, err)
	}
}

// setUp records whether Redis answers, reporting changes once.
func (s *Store) setUp(up bool, err error) {
	if s.up.Load() == up {
		return
	}
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if s.up.Swap(up) == up {
		return
	}
	s.failures.Store(0)
	if !up {
		s.replicas.Store(0)
		for _, ep := range s.pool.All() {
			ep.SetRemoteLoad(0) // the others' load is unknown: route on ours
		}
	}
	if s.opts.OnState != nil {
		s.opts.OnState(up, err)
	}
}

// Run syncs load (and reconnects) every load_interval, writes queued
// saves and learned blocks, and passes on what the other replicas learned,
// until ctx ends; then it closes the connections.
func (s *Store) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	sub := s.subscribe(ctx)
	go func() { defer wg.Done(); s.writeAll(ctx) }()
	go func() { defer wg.Done(); s.listen(ctx, sub) }()
	tick := time.NewTicker(s.cfg.LoadInterval)
	defer tick.Stop()
	for {
		if time.Since(time.Unix(0, s.lastSync.Load())) >= s.cfg.LoadInterval {
			s.sync(ctx) // unless a write batch carried one since
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			_ = s.client.Close()
			return
		case <-tick.C:
		}
	}
}

// write is one queued write: a session record (nil: none) and the blocks
// workers learned (identities: none when empty).
type write struct {
	rec        *router.SessionRecord
	forget     string // a session key to delete
	identities []string
	hashes     []uint64
}

// writeAll sends queued writes, pipelined in batches, until ctx ends.
func (s *Store) writeAll(ctx context.Context) {
	batch := make([]write, 0, saveBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-s.writes:
			batch = append(batch[:0], w)
		}
		for len(batch) < saveBatch && len(s.writes) > 0 {
			batch = append(batch, <-s.writes)
		}
		s.writeBatch(ctx, batch)
	}
}

// writeBatch sends a batch in one round trip: a load sync (so that Run
// need not make one of its own), each record with its TTL, each learned
// block list published to the other replicas.
func (s *Store) writeBatch(ctx context.Context, batch []write) {
	if !s.up.Load() {
		s.dropped.Add(uint64(len(batch)))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Redis.Timeout)
	defer cancel()
	pipe := s.client.Pipeline()
	synced := syncScript.EvalSha(ctx, pipe, nil, s.syncArgs(s.pool.All())...)
	s.queueWrites(ctx, pipe, batch)
	s.roundTrip.Add(1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		s.dropped.Add(uint64(len(batch)))
		s.failed(err)
		return
	}
	if res, err := synced.Result(); err == nil {
		_ = s.apply(res) // a reply that does not parse leaves the next sync to Run
	}
}

// queueWrites adds writes to pipe: each record with its TTL, each learned
// block list published to the other replicas.
func (s *Store) queueWrites(ctx context.Context, pipe redis.Pipeliner, writes []write) {
	for _, w := range writes {
		if w.rec != nil {
			pipe.Set(ctx, s.prefix+"s:"+w.rec.Key, encodeRecord(*w.rec), s.opts.SessionTTL)
		}
		if w.forget != "" {
			pipe.Del(ctx, s.prefix+"s:"+w.forget)
		}
		if len(w.identities) > 0 {
			pipe.Publish(ctx, s.prefix+learnedChannel, encodeLearned(s.replica, w.identities, w.hashes))
		}
	}
}
