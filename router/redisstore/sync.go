package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
)

// sync is one exchange: it publishes this replica's load per worker and
// sets each endpoint's remote load to the other live replicas' sum, and
// delivers changed admin changes. While Redis is down it is
// the reconnect attempt; the first success loads the scripts and marks the
// store up.
func (s *Store) sync(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Redis.Timeout+s.cfg.Redis.DialTimeout)
	defer cancel()
	if !s.up.Load() {
		if err := s.loadScripts(ctx); err != nil {
			s.setUp(false, err)
			return
		}
	}
	s.syncs.Add(1)
	res, err := s.call(ctx, syncScript, s.syncArgs(s.pool.All()))
	if err != nil {
		return
	}
	if err := s.apply(res); err != nil {
		s.failed(err)
		return
	}
	s.setUp(true, nil)
}

// syncArgs are syncScript's arguments: this replica's load per worker.
func (s *Store) syncArgs(all []*router.Endpoint) []any {
	args := []any{s.prefix, s.replica, s.cfg.LoadTTL.Milliseconds(), 0}
	loads := 0
	for _, ep := range all {
		if load := ep.LocalLoad(); load > 0 {
			args = append(args, ep.Identity(), load)
			loads++
		}
	}
	args[3] = loads
	return args
}

// loadScripts puts the scripts in Redis's cache: pipelined saves use
// EVALSHA only, and a restarted Redis has forgotten them.
func (s *Store) loadScripts(ctx context.Context) error {
	s.roundTrip.Add(1)
	pipe := s.client.Pipeline()
	for _, src := range scriptSources {
		pipe.ScriptLoad(ctx, src)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// apply reads syncScript's reply: {live replicas, loads, workers}, and
// marks the sync done.
func (s *Store) apply(res any) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	parts, ok := res.([]any)
	if !ok || len(parts) != 3 {
		return fmt.Errorf("redisstore: unexpected sync reply %T", res)
	}
	live, _ := parts[0].(int64)
	s.replicas.Store(live)
	if err := s.setRemoteLoads(parts[1]); err != nil {
		return err
	}
	workers, err := pairs(parts[2])
	if err != nil {
		return err
	}
	s.deliverWorkers(workers)
	s.lastSync.Store(time.Now().UnixNano())
	return nil
}

// setRemoteLoads sets each endpoint's remote load from othersLoad's reply.
func (s *Store) setRemoteLoads(reply any) error {
	loads, err := pairs(reply)
	if err != nil {
		return err
	}
	for _, ep := range s.pool.All() {
		n, _ := strconv.ParseInt(loads[ep.Identity()], 10, 64)
		ep.SetRemoteLoad(n)
	}
	return nil
}

// pairs reads a flat field, value array into a map.
func pairs(v any) (map[string]string, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return nil, fmt.Errorf("redisstore: unexpected pairs %T", v)
	}
	m := make(map[string]string, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		m[k] = v
	}
	return m, nil
}

// WorkerChange is an admin change to one worker, shared so that every
// replica applies what one replica's admin API was told.
type WorkerChange struct {
	// Op is add, remove, drain or undrain.
	Op string `json:"op"`
	// Member is the worker; for add, everything needed to add it; for the
	// others, its URL (identity) matters.
	ID            string      `json:"id"`
	URL           string      `json:"url"`
	Role          disagg.Role `json:"role,omitempty"`
	BootstrapPort int         `json:"bootstrap_port,omitempty"`
	// Migrate, on a drain, moves the worker's streams in flight elsewhere.
	Migrate bool `json:"migrate,omitempty"`
}

// Worker change operations.
const (
	OpAdd     = "add"
	OpRemove  = "remove"
	OpDrain   = "drain"
	OpUndrain = "undrain"
)

// Identity is the worker's identity as router.Endpoint.Identity gives it.
func (c WorkerChange) Identity() string { return router.URLIdentity(c.URL) }

// deliverWorkers hands the admin changes to OnWorkers when they differ from
// the last delivery, in identity order.
func (s *Store) deliverWorkers(raw map[string]string) {
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sig strings.Builder
	changes := make([]WorkerChange, 0, len(keys))
	for _, k := range keys {
		sig.WriteString(k + "\x00" + raw[k] + "\x00")
		var c WorkerChange
		if json.Unmarshal([]byte(raw[k]), &c) == nil && c.Identity() == k {
			changes = append(changes, c)
		}
	}
	if s.delivered && sig.String() == s.workers {
		return
	}
	s.workers, s.delivered = sig.String(), true
	if s.opts.OnWorkers != nil {
		s.opts.OnWorkers(changes)
	}
}

// ErrNotShared is returned by PublishWorker while Redis is down: the change
// would reach only this replica.
var ErrNotShared = errors.New("the shared store is down: the change would not reach the other replicas")

// PublishWorker records an admin change for every replica (they apply it
// on their next sync).
func (s *Store) PublishWorker(ctx context.Context, c WorkerChange) error {
	if !s.up.Load() {
		return ErrNotShared
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Redis.Timeout)
	defer cancel()
	s.roundTrip.Add(1)
	if err := s.client.HSet(ctx, s.prefix+"workers", c.Identity(), raw).Err(); err != nil {
		s.failed(err)
		return fmt.Errorf("%w: %w", ErrNotShared, err)
	}
	return nil
}
