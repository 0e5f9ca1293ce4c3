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
	"encoding/binary"
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

// Index bounds (see scripts.go).
const (
	// maxPerEnd is how many sessions may end their previous prompt at one
	// block before the end counts as a common prefix.
	maxPerEnd = 8
	// maxMatchEnds is how many ends with sessions one Find returns.
	maxMatchEnds = 2
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
	cfg     Config
	opts    Options
	pool    *router.Pool
	client  *redis.Client
	prefix  string
	replica string

	up        atomic.Bool
	failures  atomic.Int32 // calls failed in a row
	stateMu   sync.Mutex   // serialises up/down changes and their OnState calls
	saves     chan router.SessionRecord
	dropped   atomic.Uint64
	roundTrip atomic.Uint64
	replicas  atomic.Int64
	// workers is the workers hash as last delivered to OnWorkers
	// (delivered: once at least); Run's goroutine only.
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
	return &Store{cfg: cfg, opts: opts, pool: pool, client: client, prefix: r.KeyPrefix, replica: replicaName(),
		saves: make(chan router.SessionRecord, saveQueue)}, nil
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
// pipelined batch of saves, each admin change).
func (s *Store) RoundTrips() uint64 { return s.roundTrip.Load() }

// DroppedSaves counts the session saves dropped because Redis was down or
// the queue was full.
func (s *Store) DroppedSaves() uint64 { return s.dropped.Load() }

// Find implements router.SharedState: one script call bounded by the
// configured timeout.
func (s *Store) Find(key string, ends []uint64) ([]router.SessionRecord, error) {
	if !s.up.Load() {
		return nil, router.ErrStoreDown
	}
	args := []any{s.prefix, key, maxPerEnd, maxMatchEnds, s.replica, packEnds(ends)}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Redis.Timeout)
	defer cancel()
	start := time.Now()
	res, err := s.call(ctx, findScript, args)
	if s.opts.ObserveFind != nil {
		s.opts.ObserveFind(time.Since(start))
	}
	if err != nil {
		return nil, err
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 2 {
		return nil, fmt.Errorf("redisstore: unexpected find reply %T", res)
	}
	if err := s.setRemoteLoads(parts[1]); err != nil {
		return nil, err
	}
	return decodeFound(parts[0])
}

// packEnds writes ends as one string of 8-byte keys (endKey each): one
// script argument, not one per end.
func packEnds(ends []uint64) string {
	b := make([]byte, 8*len(ends))
	for i, e := range ends {
		binary.BigEndian.PutUint64(b[8*i:], e)
	}
	return string(b)
}

// decodeFound reads findScript's (key, record) pairs; a malformed record
// is skipped.
func decodeFound(res any) ([]router.SessionRecord, error) {
	flat, ok := res.([]any)
	if !ok || len(flat)%2 != 0 {
		return nil, fmt.Errorf("redisstore: unexpected find records %T", res)
	}
	out := make([]router.SessionRecord, 0, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		key, _ := flat[i].(string)
		raw, _ := flat[i+1].(string)
		if rec, err := decodeRecord(key, raw); err == nil {
			out = append(out, rec)
		}
	}
	return out, nil
}

// Save implements router.SharedState: the record is queued for the writer
// (Run), never waited for.
func (s *Store) Save(rec router.SessionRecord) {
	if !s.up.Load() {
		s.dropped.Add(1)
		return
	}
	select {
	case s.saves <- rec:
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

// publishGap is the least time between two load syncs: a replica whose
// load changes all the time publishes at most this often.
const publishGap = 5 * time.Millisecond

// Run syncs load (and reconnects) every load_interval and as soon as this
// replica's load changed (at most every publishGap), and writes queued
// saves, until ctx ends; then it closes the connections.
func (s *Store) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() { defer close(done); s.writeSaves(ctx) }()
	tick := time.NewTicker(s.cfg.LoadInterval)
	defer tick.Stop()
	for {
		synced := time.Now()
		s.sync(ctx)
		select {
		case <-ctx.Done():
			<-done
			_ = s.client.Close()
			return
		case <-tick.C:
		case <-s.pool.LoadChanged():
		}
		if wait := publishGap - time.Since(synced); wait > 0 {
			time.Sleep(wait) // changes in a burst share one publication
		}
	}
}

// writeSaves sends queued saves, pipelined in batches, until ctx ends.
func (s *Store) writeSaves(ctx context.Context) {
	batch := make([]router.SessionRecord, 0, saveBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case rec := <-s.saves:
			batch = append(batch[:0], rec)
		}
		for len(batch) < saveBatch && len(s.saves) > 0 {
			batch = append(batch, <-s.saves)
		}
		s.writeBatch(ctx, batch)
	}
}

func (s *Store) writeBatch(ctx context.Context, batch []router.SessionRecord) {
	if !s.up.Load() {
		s.dropped.Add(uint64(len(batch)))
		return
	}
	ttl := s.opts.SessionTTL.Milliseconds()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Redis.Timeout)
	defer cancel()
	pipe := s.client.Pipeline()
	for _, rec := range batch {
		saveScript.Run(ctx, pipe, nil, s.prefix, rec.Key, encodeRecord(rec), endKey(rec.End), ttl, maxPerEnd)
	}
	s.roundTrip.Add(1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		s.dropped.Add(uint64(len(batch)))
		s.failed(err)
	}
}
