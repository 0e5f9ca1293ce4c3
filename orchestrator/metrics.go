package orchestrator

import (
	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/router/kvindex"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are duet's Prometheus series (prefix duet_).
type metrics struct {
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	ttft       *prometheus.HistogramVec
	ttftRoute  *prometheus.HistogramVec
	phase      *prometheus.HistogramVec
	retries    *prometheus.CounterVec
	migrations *prometheus.CounterVec
	events     prometheus.Counter
	bytes      prometheus.Counter
	decisions  *prometheus.CounterVec
	cacheError prometheus.Histogram

	tenantRequests *prometheus.CounterVec // tenant, status
	tenantTokens   *prometheus.CounterVec // tenant, kind
	tenantRejected *prometheus.CounterVec // tenant, limit

	// Children bound once for the label values every request uses:
	// WithLabelValues hashes its values and takes a lock on every call.
	byEndpoint         [3]endpointSeries // indexed by protocol.Endpoint; 0 is unused
	phaseCtx, phaseGen prometheus.Observer
	byRoute            map[string]prometheus.Observer // TTFT by route kind (router.DecisionKinds)
}

// ttftByRoute returns the TTFT series of a decision's kind.
func (m *metrics) ttftByRoute(decision string) prometheus.Observer {
	return m.byRoute[router.DecisionKind(decision)]
}

// endpointSeries are the series of one endpoint every request records.
type endpointSeries struct {
	ok             prometheus.Counter // requests answered 200
	duration, ttft prometheus.Observer
}

// bind binds the children every request uses.
func (m *metrics) bind() {
	for _, e := range []protocol.Endpoint{protocol.EndpointChat, protocol.EndpointCompletions} {
		m.byEndpoint[e] = m.seriesOf(e)
	}
	m.phaseCtx, m.phaseGen = m.phase.WithLabelValues(phaseContext), m.phase.WithLabelValues(phaseGeneration)
	m.byRoute = map[string]prometheus.Observer{"other": m.ttftRoute.WithLabelValues("other")}
	for _, k := range router.DecisionKinds {
		m.byRoute[k] = m.ttftRoute.WithLabelValues(k)
	}
}

// endpoint returns the series of e, bound once for a valid endpoint.
func (m *metrics) endpoint(e protocol.Endpoint) endpointSeries {
	if e.Valid() {
		return m.byEndpoint[e]
	}
	return m.seriesOf(e)
}

func (m *metrics) seriesOf(e protocol.Endpoint) endpointSeries {
	name := e.String()
	return endpointSeries{ok: m.requests.WithLabelValues(name, "200"), duration: m.duration.WithLabelValues(name),
		ttft: m.ttft.WithLabelValues(name)}
}

var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

func newMetrics(reg prometheus.Registerer, r *router.Router, up *upstream) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_requests_total",
			Help: "Client requests by endpoint and HTTP status."}, []string{"endpoint", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "duet_request_duration_seconds",
			Help: "End-to-end request latency.", Buckets: latencyBuckets}, []string{"endpoint"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "duet_ttft_seconds",
			Help: "Time from request arrival to the first content token.", Buckets: latencyBuckets}, []string{"endpoint"}),
		ttftRoute: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "duet_ttft_by_route_seconds",
			Help:    "Time to the first content token by how the request was routed: new (a conversation's first turn), sticky or implicit (a follow-up on its pair), repin, spill, or the policy's name.",
			Buckets: latencyBuckets}, []string{"route"}),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "duet_phase_duration_seconds",
			Help: "Duration of the context and generation phases.", Buckets: latencyBuckets}, []string{"phase"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_retries_total",
			Help: "Attempts retried after a worker failure, by failed phase (generation-only: the same handle on another gen worker)."}, []string{"phase"}),
		migrations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_migrations_total",
			Help: "Generations whose gen worker failed mid-stream, by failure (died, worker_down, stalled, error_event, aborted, garbled) and outcome: migrated, failed (no worker could continue it), or why it was not tried (off, limit, n, logprobs, seed, structured_output, tool_calls, reasoning, batch, at_limit, unparsable)."},
			[]string{"reason", "outcome"}),
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "duet_relayed_events_total",
			Help: "SSE events relayed from gen workers to clients."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "duet_relayed_bytes_total",
			Help: "Bytes of SSE event data relayed to clients."}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_route_decisions_total",
			Help: "Routing decisions: sticky, implicit, fork, branch, new, repin, spill:<reason>, hash, fallback, or the policy name."}, []string{"decision"}),
		cacheError: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "duet_router_cached_tokens_error",
			Help:    "Per request whose ctx worker the router expected to hold part of the prompt: the tokens it expected minus the cached tokens the worker reported (exact: the le=0 bucket less the le=-1 one).",
			Buckets: []float64{-4096, -512, -64, -32, -1, 0, 32, 64, 512, 4096, 32768}}),
		tenantRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_tenant_requests_total",
			Help: "Requests of configured tenants by tenant and HTTP status (429 with duet_tenant_rejected_total for their limits)."}, []string{"tenant", "status"}),
		tenantTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_tenant_tokens_total",
			Help: "Tokens of configured tenants' answered requests, by tenant and kind (input, output)."}, []string{"tenant", "kind"}),
		tenantRejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_tenant_rejected_total",
			Help: "Requests refused for their tenant's limits, by tenant and limit (input_tokens_per_minute, output_tokens_per_minute, max_concurrency)."}, []string{"tenant", "limit"}),
	}
	m.bind()
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.ttft, m.ttftRoute, m.phase, m.retries, m.migrations, m.events, m.bytes,
		m.decisions, m.cacheError, m.tenantRequests, m.tenantTokens, m.tenantRejected, &workerCollector{router: r}, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "duet_upstream_connections", Help: "Open connections to workers, idle or in use."},
			func() float64 { return float64(up.conns()) })} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// workerCollector reports every worker's load, in-flight leases, health,
// pinned sessions and assumed KV cache size, and the router's counters, at
// scrape time, so workers that come and go need no bookkeeping.
type workerCollector struct{ router *router.Router }

var (
	workerLoadDesc = prometheus.NewDesc("duet_worker_load_tokens",
		"Token-weighted load charged to a worker by live leases.", []string{"worker", "role"}, nil)
	workerInFlightDesc = prometheus.NewDesc("duet_worker_inflight",
		"Live leases (request phases) on a worker.", []string{"worker", "role"}, nil)
	workerHealthyDesc = prometheus.NewDesc("duet_worker_healthy",
		"1 when the worker passed its last health check.", []string{"worker", "role"}, nil)
	workerSessionsDesc = prometheus.NewDesc("duet_worker_sessions",
		"Conversations pinned to a worker.", []string{"worker", "role"}, nil)
	workerCacheDesc = prometheus.NewDesc("duet_worker_kv_cache_tokens",
		"The KV cache the router assumes a worker has, in tokens; source: worker (it reported it), config (kv_blocks_per_worker) or default.",
		[]string{"worker", "role", "source"}, nil)
	cacheSignalDesc = prometheus.NewDesc("duet_cache_signal",
		"1 for where the router's view of a worker's KV cache comes from now: estimate (the worker publishes no KV events), events, or fallback (its events stopped agreeing with the cached tokens it reports).",
		[]string{"worker", "role", "state"}, nil)
	indexedBlocksDesc = prometheus.NewDesc("duet_worker_indexed_blocks",
		"Blocks the router's cache index holds for a worker, by view: estimate or events.", []string{"worker", "role", "view"}, nil)
	workerEjectionsDesc = prometheus.NewDesc("duet_worker_ejections_total",
		"Times passive health took a worker out of routing after a connect error or 5xx answers.", []string{"worker", "role"}, nil)
	sessionsDesc  = prometheus.NewDesc("duet_router_sessions", "Live sessions in the router's table.", nil, nil)
	breaksDesc    = prometheus.NewDesc("duet_router_affinity_breaks_total", "Session affinity lost, by reason: ttl, lru, worker_gone, unavailable, retry, moved, spill, store_down.", []string{"reason"}, nil)
	spillsDesc    = prometheus.NewDesc("duet_router_spills_total", "Requests sent away from an overloaded pinned worker, by reason.", []string{"reason"}, nil)
	fallbacksDesc = prometheus.NewDesc("duet_router_store_fallbacks_total",
		"Requests routed on this replica's local state because the shared store (cluster.state: redis) could not answer.", nil, nil)
)

func (c *workerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- workerLoadDesc
	ch <- workerInFlightDesc
	ch <- workerHealthyDesc
	ch <- workerSessionsDesc
	ch <- workerCacheDesc
	ch <- workerEjectionsDesc
	ch <- cacheSignalDesc
	ch <- indexedBlocksDesc
	ch <- sessionsDesc
	ch <- breaksDesc
	ch <- spillsDesc
	ch <- fallbacksDesc
}

// collectCache reports a worker's cache signal and indexed blocks.
func (c *workerCollector) collectCache(ch chan<- prometheus.Metric, ep *router.Endpoint, role string) {
	cache := c.router.Cache(ep)
	state, _ := cache.State()
	for _, st := range kvindex.States {
		v := 0.0
		if st == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(cacheSignalDesc, prometheus.GaugeValue, v, ep.ID, role, string(st))
	}
	estimate, events := cache.Held()
	ch <- prometheus.MustNewConstMetric(indexedBlocksDesc, prometheus.GaugeValue, float64(estimate), ep.ID, role, "estimate")
	if events >= 0 {
		ch <- prometheus.MustNewConstMetric(indexedBlocksDesc, prometheus.GaugeValue, float64(events), ep.ID, role, "events")
	}
}

func (c *workerCollector) Collect(ch chan<- prometheus.Metric) {
	sessions := c.router.SessionsPerWorker()
	for _, ep := range c.router.Pool().All() {
		role := string(ep.Role)
		healthy := 0.0
		if ep.Healthy() {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(workerLoadDesc, prometheus.GaugeValue, float64(ep.Load()), ep.ID, role)
		ch <- prometheus.MustNewConstMetric(workerInFlightDesc, prometheus.GaugeValue, float64(ep.InFlight()), ep.ID, role)
		ch <- prometheus.MustNewConstMetric(workerHealthyDesc, prometheus.GaugeValue, healthy, ep.ID, role)
		ch <- prometheus.MustNewConstMetric(workerSessionsDesc, prometheus.GaugeValue, float64(sessions[ep.ID]), ep.ID, role)
		cacheTokens, cacheSource := c.router.CacheSize(ep)
		ch <- prometheus.MustNewConstMetric(workerCacheDesc, prometheus.GaugeValue, float64(cacheTokens), ep.ID, role, cacheSource)
		ch <- prometheus.MustNewConstMetric(workerEjectionsDesc, prometheus.CounterValue, float64(ep.Ejections()), ep.ID, role)
		c.collectCache(ch, ep, role)
	}
	ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(c.router.Sessions()))
	for _, b := range c.router.Stats().Breaks() {
		ch <- prometheus.MustNewConstMetric(breaksDesc, prometheus.CounterValue, float64(b.Value), b.Reason)
	}
	for _, s := range c.router.Stats().Spills() {
		ch <- prometheus.MustNewConstMetric(spillsDesc, prometheus.CounterValue, float64(s.Value), s.Reason)
	}
	ch <- prometheus.MustNewConstMetric(fallbacksDesc, prometheus.CounterValue, float64(c.router.Stats().StoreFallbacks()))
}
