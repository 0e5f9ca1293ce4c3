package main

import (
	"context"

	"github.com/duet-serve/duet/orchestrator"
	"github.com/duet-serve/duet/orchestrator/frontend"
	"github.com/duet-serve/duet/orchestrator/queue"
	"github.com/duet-serve/duet/orchestrator/tenant"
	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/router/redisstore"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/duet-serve/duet/workers"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// modelRun is one served model: its fleet and the pipeline over it. One
// duet serves one model (the file's top-level sections) or several
// (models), each a modelRun of its own.
type modelRun struct {
	cfg   Config // the model's whole configuration
	names []string
	fleet *workers.Fleet
	ps    *poolSync
	tok   *tokenizer.Tokenizer
	rt    *router.Router
	orch  *orchestrator.Orchestrator
	// shared is the model's scope of the shared store (nil: local state).
	shared *redisstore.Store
	// stops undo startModel (see stop).
	stops []func()
}

// startModel launches cfg's fleet (several: each model's logs are named
// after it) and starts keeping its pool in sync with it and its
// discovery sources until syncCtx ends or stop is called.
func startModel(ctx, syncCtx context.Context, cfg Config, several bool, log *zap.Logger) (*modelRun, error) {
	r := &modelRun{cfg: cfg, names: servedModels(cfg)}
	syncCtx, cancel := context.WithCancel(syncCtx)
	r.stops = append(r.stops, cancel) // stops[0]: stop calls it first, so that the loops below end before they are waited for
	if several {
		log = log.With(zap.String("model", r.names[0]))
	}
	cfg.Tokenizer = modelTokenizer(cfg)
	r.cfg.Tokenizer = cfg.Tokenizer
	tok, err := tokenizer.New(cfg.Tokenizer)
	if err != nil {
		r.stop()
		return nil, err
	}
	r.tok = tok
	simArgs, err := simTokenizerArgs(cfg.Tokenizer)
	if err != nil {
		r.stop()
		return nil, err
	}
	fleet, err := workers.New(cfg.Fleet, workers.Options{SimProtocol: cfg.Orchestrator.Protocol, SimArgs: simArgs,
		Logger: log.Named("fleet"), CacheSize: cacheSizeReaders(cfg.Orchestrator.Protocol)})
	if err != nil {
		r.stop()
		return nil, err
	}
	r.fleet = fleet
	r.stops = append(r.stops, func() { stopFleet(fleet, cfg.Fleet.ShutdownGrace, log) })
	if err := fleet.Start(ctx); err != nil {
		r.stop()
		return nil, err
	}
	r.ps = &poolSync{fleet: fleet, pool: router.NewPool(), protocol: cfg.Orchestrator.Protocol}
	done := syncPool(syncCtx, r.ps)
	r.stops = append(r.stops, func() { <-done })
	fileDone, err := startWorkersFile(syncCtx, cfg.Fleet, r.ps, log)
	if err != nil {
		r.stop()
		return nil, err
	}
	r.stops = append(r.stops, func() { <-fileDone })
	etcdDone := startEtcd(syncCtx, cfg.Fleet, r.ps, log)
	r.stops = append(r.stops, func() { <-etcdDone })
	return r, nil
}

// stop undoes startModel: its loops end, then its fleet stops.
func (r *modelRun) stop() {
	if len(r.stops) == 0 {
		return
	}
	r.stops[0]() // the cancel: every loop ends
	for i := len(r.stops) - 1; i > 0; i-- {
		r.stops[i]()
	}
	r.stops = nil
}

// startCluster starts the model's shared store (cluster.state redis;
// several models: each its own scope of the keys and its metrics labelled
// with its name) and returns what stops it.
func (r *modelRun) startCluster(ctx context.Context, reg prometheus.Registerer, several bool, log *zap.Logger) (func(), error) {
	scope := ""
	if several {
		scope = "m:" + r.names[0] + ":"
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"model": r.names[0]}, reg)
		log = log.With(zap.String("model", r.names[0]))
	}
	shared, stop, err := startCluster(ctx, r.cfg, r.ps, reg, log, scope)
	r.shared = shared
	return stop, err
}

// modelDeps are what every model's pipeline shares.
type modelDeps struct {
	access  *zap.Logger
	reg     prometheus.Registerer
	queue   *queue.Queue
	limits  *tenant.Limiter
	tenants *tenant.Set
	tracer  trace.Tracer
}

// build makes the model's router and orchestrator. Several models'
// metrics carry the model's name as the label model.
func (r *modelRun) build(d modelDeps, several bool, log *zap.Logger) error {
	pool := r.ps.pool
	rt, err := router.New(pool, r.cfg.Router, nil)
	if err != nil {
		return err
	}
	rt.OnSignalChange(logSignalChange(log.Named("router"), r.cfg.Router.TokensPerBlock))
	if r.shared != nil {
		rt.ShareState(r.shared)
	}
	reg := d.reg
	if several {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"model": r.names[0]}, reg)
	}
	ocfg := r.cfg.Orchestrator
	ocfg.Models = r.names
	orch, err := orchestrator.New(orchestrator.Options{Config: ocfg, Aliased: several, Router: rt, Tokenizer: r.tok, Log: log,
		AccessLog: d.access, Registry: reg, Queue: d.queue, Tracer: d.tracer, Tenants: d.tenants, Limits: d.limits})
	if err != nil {
		return err
	}
	r.rt, r.orch = rt, orch
	return nil
}

// frontendModel is the model as the frontend serves it.
func (r *modelRun) frontendModel() frontend.Model {
	fleet := r.fleet
	return frontend.Model{Names: r.names, Orchestrator: r.orch, Pool: r.ps.pool,
		Fleet: func() any { return fleet.Snapshot() }, Admin: admin{fleet: fleet, sync: r.ps, shared: r.shared}}
}

// newQueue builds the admission queue: one key per model, each key's
// capacity from its model's gen workers (the orchestrator keys a request
// by its model's name, whatever alias or adapter it asked for).
func newQueue(cfg queue.Config, runs []*modelRun, reg prometheus.Registerer, log *zap.Logger) (*queue.Queue, error) {
	opts := queue.Options{Log: log.Named("queue"), Registry: reg}
	if len(runs) > 1 {
		opts.Workers = func(key string) []*router.Endpoint {
			for _, r := range runs {
				if r.names[0] == key {
					return r.ps.pool.Available(disagg.RoleGeneration)
				}
			}
			return nil
		}
	}
	q, err := queue.New(cfg, runs[0].ps.pool, opts)
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		r.ps.pool.OnMembershipChange(q.Recheck)
	}
	return q, nil
}
