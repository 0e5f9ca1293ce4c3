package main

import (
	"context"
	"time"

	"github.com/duet-serve/duet/orchestrator/tenant"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/router/redisstore"
	"github.com/duet-serve/duet/workers"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// startCluster starts the shared store when cluster.state is redis and
// returns it (nil with local state) and a function that stops it. The store
// syncs load and admin changes until stopped; the router shares sessions
// through it once the model's pipeline is built. scope keeps one model's
// keys apart from the others' ("" for one model).
func startCluster(ctx context.Context, cfg Config, ps *poolSync, reg prometheus.Registerer, log *zap.Logger, scope string) (*redisstore.Store, func(), error) {
	if cfg.Cluster.State != redisstore.StateRedis {
		return nil, func() {}, nil
	}
	log = log.Named("cluster")
	findSeconds := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "duet_cluster_store_find_seconds",
		Help:    "Time a request's routing waited for the shared store's answer.",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05}})
	reg.MustRegister(findSeconds)
	store, err := redisstore.New(cfg.Cluster, ps.pool, redisstore.Options{
		SessionTTL:  cfg.Router.SessionTTL,
		Scope:       scope,
		OnState:     logStoreState(log, cfg.Cluster.Redis.Address),
		ObserveFind: func(d time.Duration) { findSeconds.Observe(d.Seconds()) },
		OnWorkers:   func(changes []redisstore.WorkerChange) { applyWorkerChanges(ps, changes, log) },
	})
	if err != nil {
		return nil, nil, err
	}
	registerStoreMetrics(reg, store)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); store.Run(ctx) }()
	return store, func() { cancel(); <-done }, nil
}

// logStoreState logs each change between reachable and not, once.
func logStoreState(log *zap.Logger, addr string) func(bool, error) {
	return func(up bool, err error) {
		if up {
			log.Info("shared store reachable: routing on shared state", zap.String("redis", addr))
			return
		}
		log.Warn("shared store unreachable: routing on local state until it answers", zap.String("redis", addr), zap.Error(err))
	}
}

func registerStoreMetrics(reg prometheus.Registerer, s *redisstore.Store) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "duet_cluster_store_up",
			Help: "1 while the shared store answers."}, func() float64 {
			if s.Up() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "duet_cluster_replicas",
			Help: "Live duet replicas sharing the store, this one included (0 while it is down)."},
			func() float64 { return float64(s.Replicas()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "duet_cluster_store_round_trips_total",
			Help: "Calls to the shared store: finds, load syncs, batches of saves, admin changes."},
			func() float64 { return float64(s.RoundTrips()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "duet_cluster_store_syncs_total",
			Help: "Of the calls to the shared store, the load syncs a replica made on its own, after load_interval without a routing call or write batch: the heartbeat, not caused by requests."},
			func() float64 { return float64(s.Syncs()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "duet_cluster_store_dropped_saves_total",
			Help: "Session saves not written because the store was down or the queue full."},
			func() float64 { return float64(s.DroppedSaves()) }),
	)
}

// applyWorkerChanges makes this replica's fleet and pool follow the admin
// changes other replicas shared. Changes are idempotent: a worker already
// removed, already present or already draining is left as it is.
func applyWorkerChanges(ps *poolSync, changes []redisstore.WorkerChange, log *zap.Logger) {
	for _, c := range changes {
		ep := ps.pool.ByIdentity(c.Identity())
		var err error
		switch {
		case c.Op == redisstore.OpRemove && ep != nil:
			err = ps.fleet.RemoveWorker(ep.ID)
		case c.Op == redisstore.OpAdd && ep == nil && !inFleet(ps.fleet, c.Identity()):
			err = ps.fleet.AddWorker(workers.ExternalWorker{Name: c.ID, URL: c.URL, Role: c.Role, BootstrapPort: c.BootstrapPort})
		case (c.Op == redisstore.OpDrain || c.Op == redisstore.OpUndrain) && ep != nil:
			ep.SetDraining(c.Op == redisstore.OpDrain)
			if c.Op == redisstore.OpDrain && c.Migrate {
				ep.MarkDown()
			}
		}
		if err != nil {
			log.Warn("shared admin change not applied", zap.String("op", c.Op), zap.String("worker", c.ID), zap.String("url", c.URL), zap.Error(err))
		}
	}
	ps.sync()
}

// inFleet reports whether the fleet has a worker (removed or not) at that
// identity: a removed plan worker keeps its name and cannot come back.
func inFleet(fleet *workers.Fleet, identity string) bool {
	for _, w := range fleet.Snapshot() {
		if router.URLIdentity(w.URL) == identity && !w.Removed {
			return true
		}
	}
	return false
}

// newTenantLimiter enforces the tenants' limits across every replica
// through the shared store when there is one, else on this replica.
func newTenantLimiter(cfg tenant.Config, shared *redisstore.Store) *tenant.Limiter {
	if shared == nil {
		return tenant.NewLimiter(cfg, nil, nil)
	}
	return tenant.NewLimiter(cfg, shared, nil)
}
