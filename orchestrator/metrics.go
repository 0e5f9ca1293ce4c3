package orchestrator

import (
	"github.com/duet-serve/duet/router"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are duet's Prometheus series (prefix duet_).
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	ttft     *prometheus.HistogramVec
	phase    *prometheus.HistogramVec
	retries  *prometheus.CounterVec
	events   prometheus.Counter
	bytes    prometheus.Counter
}

var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

func newMetrics(reg prometheus.Registerer, pool *router.Pool) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_requests_total",
			Help: "Client requests by endpoint and HTTP status."}, []string{"endpoint", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "duet_request_duration_seconds",
			Help: "End-to-end request latency.", Buckets: latencyBuckets}, []string{"endpoint"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "duet_ttft_seconds",
			Help: "Time from request arrival to the first content token.", Buckets: latencyBuckets}, []string{"endpoint"}),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "duet_phase_duration_seconds",
			Help: "Duration of the context and generation phases.", Buckets: latencyBuckets}, []string{"phase"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_retries_total",
			Help: "Attempts retried after a worker failure, by failed phase."}, []string{"phase"}),
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "duet_relayed_events_total",
			Help: "SSE events relayed from gen workers to clients."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "duet_relayed_bytes_total",
			Help: "Bytes of SSE event data relayed to clients."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.ttft, m.phase, m.retries, m.events, m.bytes, &workerCollector{pool: pool}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// workerCollector reports every worker's load, in-flight leases and health
// at scrape time, so workers that come and go need no bookkeeping.
type workerCollector struct{ pool *router.Pool }

var (
	workerLoadDesc = prometheus.NewDesc("duet_worker_load_tokens",
		"Token-weighted load charged to a worker by live leases.", []string{"worker", "role"}, nil)
	workerInFlightDesc = prometheus.NewDesc("duet_worker_inflight",
		"Live leases (request phases) on a worker.", []string{"worker", "role"}, nil)
	workerHealthyDesc = prometheus.NewDesc("duet_worker_healthy",
		"1 when the worker passed its last health check.", []string{"worker", "role"}, nil)
)

func (c *workerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- workerLoadDesc
	ch <- workerInFlightDesc
	ch <- workerHealthyDesc
}

func (c *workerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, ep := range c.pool.All() {
		role := string(ep.Role)
		healthy := 0.0
		if ep.Healthy() {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(workerLoadDesc, prometheus.GaugeValue, float64(ep.Load()), ep.ID, role)
		ch <- prometheus.MustNewConstMetric(workerInFlightDesc, prometheus.GaugeValue, float64(ep.InFlight()), ep.ID, role)
		ch <- prometheus.MustNewConstMetric(workerHealthyDesc, prometheus.GaugeValue, healthy, ep.ID, role)
	}
}
