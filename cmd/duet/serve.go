package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/duet-serve/duet/configs"
	"github.com/duet-serve/duet/orchestrator/frontend"
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
	models := cfg.resolved
	if len(models) == 0 {
		models = []Config{cfg}
	}
	for _, m := range models {
		if err := checkSimProtocol(m); err != nil {
			return err
		}
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
	syncCtx, cancelSync := context.WithCancel(ctx)
	defer cancelSync()
	runs := make([]*modelRun, 0, len(models))
	defer func() { // the fleets stop last, after every loop over them
		for _, r := range runs {
			r.stop()
		}
	}()
	for _, m := range models {
		r, err := startModel(ctx, syncCtx, m, len(models) > 1, log)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	q, err := newQueue(cfg.Queue, runs, reg, log)
	if err != nil {
		return err
	}
	queueDone := make(chan struct{})
	go func() { defer close(queueDone); q.Run(syncCtx) }()
	defer func() { cancelSync(); <-queueDone }()
	access, stopAccess, err := newAccessLogger(cfg.Log)
	if err != nil {
		return err
	}
	defer stopAccess()
	for _, r := range runs {
		stopCluster, err := r.startCluster(syncCtx, reg, len(runs) > 1, log)
		if err != nil {
			return err
		}
		defer stopCluster()
	}
	tracer, stopTracing, err := startTracing(ctx, cfg.Tracing, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	limits := newTenantLimiter(cfg.Tenants, runs[0].shared) // limit keys are not scoped: any model's store holds them
	limitsDone := make(chan struct{})
	go func() { defer close(limitsDone); limits.Run(syncCtx.Done()) }()
	defer func() { cancelSync(); <-limitsDone }()
	deps := modelDeps{access: access, reg: reg, queue: q, limits: limits, tracer: tracer, tenants: tenant.NewSet(cfg.Tenants)}
	var served []frontend.Model
	for _, r := range runs {
		if err := r.build(deps, len(runs) > 1, log); err != nil {
			return err
		}
		served = append(served, r.frontendModel())
		feed := kvfeed.New(r.rt, log.Named("kv_events"))
		feedDone := make(chan struct{})
		go func() { defer close(feedDone); feed.Run(syncCtx) }()
		defer func() { cancelSync(); <-feedDone }()
	}
	srv, err := frontend.New(frontend.Options{Config: cfg.Server, Models: served, Gatherer: reg, Log: log, Version: versionString()})
	if err != nil {
		return err
	}
	for _, r := range runs {
		log.Info("duet serving", zap.String("url", "http://"+ln.Addr().String()), zap.String("protocol", r.cfg.Orchestrator.Protocol),
			zap.String("policy", r.cfg.Router.Policy), zap.String("state", cfg.Cluster.State), zap.Strings("models", r.names),
			zap.String("tokenizer", r.tok.Info().Tokenizer), zap.String("chat_template", r.tok.Info().ChatTemplate))
	}
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
