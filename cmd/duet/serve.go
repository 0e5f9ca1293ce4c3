package main

import (
	"context"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"net"
	"strconv"
	"time"

	"github.com/duet-serve/duet/configs"
	"github.com/duet-serve/duet/orchestrator"
	"github.com/duet-serve/duet/orchestrator/frontend"
	"github.com/duet-serve/duet/orchestrator/queue"
	"github.com/duet-serve/duet/orchestrator/tenant"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/router/kvfeed"
	"github.com/duet-serve/duet/router/kvindex"
	"github.com/duet-serve/duet/router/redisstore"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/duet-serve/duet/workers"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

func newServeCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "launch the worker fleet and serve the OpenAI API with disaggregated prefill/decode",
		Long: `Launches the configured ctx and gen worker fleet, waits until it is healthy, and
serves OpenAI chat/completions and completions on server.host:server.port.
Without --config it runs the embedded quickstart: 2 ctx + 2 gen simulated
workers and the frontend on 127.0.0.1:8000.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runWith(cmd, configs.Quickstart, runServe) },
	}
	bindSectionFlags(cmd.Flags(), a.v, "server", frontend.Defaults(), "")
	bindSectionFlags(cmd.Flags(), a.v, "router", router.Defaults(), "")
	bindSectionFlags(cmd.Flags(), a.v, "cluster", redisstore.Defaults(), "cluster-")
	bindSectionFlags(cmd.Flags(), a.v, "tokenizer", tokenizer.Defaults(), "tokenizer-")
	return cmd
}

func runServe(ctx context.Context, cfg Config, log *zap.Logger) error {
	if err := checkSimProtocol(cfg); err != nil {
		return err
	}
	cfg.Tokenizer = modelTokenizer(cfg)
	tok, err := tokenizer.New(cfg.Tokenizer)
	if err != nil {
		return err
	}
	ln, err := listen(cfg.Server) // before the fleet: a taken port must not cost a model load
	if err != nil {
		return err
	}
	defer ln.Close() // Serve closes it too; this covers the paths that fail before
	stopDebug, err := startDebug(cfg.Server.DebugAddress, log)
	if err != nil {
		return err
	}
	defer stopDebug()
	simArgs, err := simTokenizerArgs(cfg.Tokenizer)
	if err != nil {
		return err
	}
	fleet, err := workers.New(cfg.Fleet, workers.Options{SimProtocol: cfg.Orchestrator.Protocol, SimArgs: simArgs,
		Logger: log.Named("fleet"), CacheSize: cacheSizeReaders(cfg.Orchestrator.Protocol)})
	if err != nil {
		return err
	}
	defer stopFleet(fleet, cfg.Fleet.ShutdownGrace, log)
	if err := fleet.Start(ctx); err != nil {
		return err
	}
	pool := router.NewPool()
	ps := &poolSync{fleet: fleet, pool: pool, protocol: cfg.Orchestrator.Protocol}
	syncCtx, cancelSync := context.WithCancel(ctx)
	defer cancelSync()
	syncDone := syncPool(syncCtx, ps)
	defer func() { cancelSync(); <-syncDone }()
	fileDone, err := startWorkersFile(syncCtx, cfg.Fleet, ps, log)
	if err != nil {
		return err
	}
	defer func() { cancelSync(); <-fileDone }()
	etcdDone := startEtcd(syncCtx, cfg.Fleet, ps, log)
	defer func() { cancelSync(); <-etcdDone }()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	q, err := queue.New(cfg.Queue, pool, queue.Options{Log: log.Named("queue"), Registry: reg})
	if err != nil {
		return err
	}
	pool.OnMembershipChange(q.Recheck)
	queueDone := make(chan struct{})
	go func() { defer close(queueDone); q.Run(syncCtx) }()
	defer func() { cancelSync(); <-queueDone }()
	access, stopAccess, err := newAccessLogger(cfg.Log)
	if err != nil {
		return err
	}
	defer stopAccess()
	shared, stopCluster, err := startCluster(syncCtx, cfg, ps, reg, log)
	if err != nil {
		return err
	}
	defer stopCluster()
	tracer, stopTracing, err := startTracing(ctx, cfg.Tracing, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	limits := newTenantLimiter(cfg.Tenants, shared)
	limitsDone := make(chan struct{})
	go func() { defer close(limitsDone); limits.Run(syncCtx.Done()) }()
	defer func() { cancelSync(); <-limitsDone }()
	srv, rt, err := buildFrontend(cfg, log, access, tok, reg, q, limits, tracer, admin{fleet: fleet, sync: ps, shared: shared})
	if err != nil {
		return err
	}
	feed := kvfeed.New(rt, log.Named("kv_events"))
	feedDone := make(chan struct{})
	go func() { defer close(feedDone); feed.Run(syncCtx) }()
	defer func() { cancelSync(); <-feedDone }()
	log.Info("duet serving", zap.String("url", "http://"+ln.Addr().String()), zap.String("protocol", cfg.Orchestrator.Protocol),
		zap.String("policy", cfg.Router.Policy), zap.String("state", cfg.Cluster.State), zap.Strings("models", servedModels(cfg)),
		zap.String("tokenizer", tok.Info().Tokenizer), zap.String("chat_template", tok.Info().ChatTemplate))
	return srv.Serve(ctx, ln)
}

// listen opens the frontend's port, which also serves the admin API and
// the metrics; the error names the key to change.
func listen(cfg frontend.Config) (net.Listener, error) {
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("config: server.port: cannot listen on %s (set server.host/server.port or --host/--port): %w", addr, err)
	}
	return ln, nil
}

func buildFrontend(cfg Config, log, access *zap.Logger, tok *tokenizer.Tokenizer, reg *prometheus.Registry, q *queue.Queue,
	limits *tenant.Limiter, tracer trace.Tracer, a admin) (*frontend.Server, *router.Router, error) {
	pool := a.sync.pool
	rt, err := router.New(pool, cfg.Router, nil)
	if err != nil {
		return nil, nil, err
	}
	rt.OnSignalChange(logSignalChange(log.Named("router"), cfg.Router.TokensPerBlock))
	if a.shared != nil {
		rt.ShareState(a.shared)
	}
	ocfg := cfg.Orchestrator
	ocfg.Models = servedModels(cfg)
	orch, err := orchestrator.New(orchestrator.Options{Config: ocfg, Router: rt, Tokenizer: tok, Log: log,
		AccessLog: access, Registry: reg, Queue: q, Tracer: tracer, Tenants: tenant.NewSet(cfg.Tenants), Limits: limits})
	if err != nil {
		return nil, nil, err
	}
	srv, err := frontend.New(frontend.Options{Config: cfg.Server, Orchestrator: orch, Pool: pool, Gatherer: reg,
		Log: log, Version: versionString(), Fleet: func() any { return a.fleet.Snapshot() }, Admin: a})
	return srv, rt, err
}

// finerBlocks reports whether ep's KV blocks divide tokensPerBlock: the
// engine then caches every block duet hashes.
func finerBlocks(ep *router.Endpoint, tokensPerBlock int) bool {
	bs := ep.KVBlockSize()
	return bs > 0 && tokensPerBlock%bs == 0
}

// logSignalChange logs each change of a worker's cache signal once: a
// fallback from its KV events to the estimate as a warning, the rest as
// information.
func logSignalChange(log *zap.Logger, tokensPerBlock int) func(*router.Endpoint, kvindex.Change) {
	return func(ep *router.Endpoint, ch kvindex.Change) {
		fields := []zap.Field{zap.String("worker", ep.ID), zap.String("from", string(ch.From)), zap.String("to", string(ch.To)),
			zap.String("reason", ch.Reason)}
		switch {
		case ch.To == kvindex.StateFallback && ch.From != ch.To:
			log.Warn("cache signal: falling back to the estimate", fields...)
			return
		case ch.From == ch.To && finerBlocks(ep, tokensPerBlock):
			log.Info("worker's KV blocks are finer than router.tokens_per_block: its events cannot be matched, the estimate is unaffected", fields...)
			return
		case ch.From == ch.To: // the worker reported a block size other than tokens_per_block
			log.Warn("worker's KV blocks are not router.tokens_per_block: its cache is estimated at duet's block size, which it does not cache by", fields...)
			return
		}
		log.Info("cache signal changed", fields...)
	}
}

// stopFleet stops every worker: SIGTERM, then SIGKILL after the grace.
func stopFleet(fleet *workers.Fleet, grace time.Duration, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), grace+5*time.Second)
	defer cancel()
	if err := fleet.Stop(ctx); err != nil {
		log.Warn("stopping workers", zap.Error(err))
	}
}
