package queue

import "github.com/prometheus/client_golang/prometheus"

// metrics are the queue's Prometheus series (prefix duet_queue_). The key
// label is the Ticket's Key (model + pool). Per-worker in-flight counts are
// not here: admission happens before routing picks a worker, and the
// router's duet_worker_inflight already reports them.
type metrics struct {
	depth        *prometheus.GaugeVec     // key, class, priority
	wait         *prometheus.HistogramVec // class, priority
	admitted     *prometheus.CounterVec   // key, class, priority
	rejected     *prometheus.CounterVec   // key, reason, priority
	cancelled    *prometheus.CounterVec   // key
	inflight     *prometheus.GaugeVec     // key
	held         *prometheus.GaugeVec     // key
	boosted      *prometheus.CounterVec   // key
	scrapeErrors *prometheus.CounterVec   // worker
}

var waitBuckets = []float64{0, .005, .025, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "duet_queue_depth",
			Help: "Requests waiting for admission, by queue key, turn class (boosted, normal) and priority class."}, []string{"key", "class", "priority"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "duet_queue_wait_seconds",
			Help: "Time from arrival to admission of admitted requests, by turn class and priority class.", Buckets: waitBuckets}, []string{"class", "priority"}),
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_queue_admitted_total",
			Help: "Requests admitted, by queue key, turn class and priority class."}, []string{"key", "class", "priority"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_queue_rejected_total",
			Help: "Requests rejected, by queue key, reason (queue_full, max_wait, shed) and priority class."}, []string{"key", "reason", "priority"}),
		cancelled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_queue_cancelled_total",
			Help: "Requests whose client went away while waiting (also those admitted at that moment, whose slot was given back at once), by queue key."}, []string{"key"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "duet_queue_inflight",
			Help: "Admitted requests not yet released, by queue key."}, []string{"key"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "duet_queue_grace_held",
			Help: "Slots held for a session's next turn (grace_period), by queue key."}, []string{"key"}),
		boosted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_queue_boosted_total",
			Help: "Requests classed as boosted (their session completed a turn within session_boost_ttl), by queue key."}, []string{"key"}),
		scrapeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "duet_queue_scrape_errors_total",
			Help: "Failed scrapes of a worker's waiting-queue gauge, by worker."}, []string{"worker"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.depth, m.wait, m.admitted, m.rejected, m.cancelled, m.inflight,
		m.held, m.boosted, m.scrapeErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
