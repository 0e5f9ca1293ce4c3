package sim

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Request outcomes, for duet_sim_requests_total.
type outcome int

const (
	outcomeOK          outcome = iota
	outcomeClientError         // 4xx other than 429
	outcomeRejected            // 429, waiting queue full
	outcomeServerError         // 5xx, including injected faults
	outcomeAborted             // client gone or server stopping mid-request
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "client_error", "rejected", "server_error", "aborted"}

// Injected fault kinds, for duet_sim_faults_injected_total.
type faultKind int

const (
	faultError faultKind = iota
	faultHang
	faultDie
	faultGarbage
	faultCut
	faultStall
	faultErrorEvent         // fault_error_event_rate, when the failure strikes
	faultKVPullFail         // fault_kv_pull_fail_rate, when the failure strikes
	faultResetCacheSilently // POST /admin/faults {"reset_cache_silently": true}, per trigger
	numFaultKinds
)

var faultNames = [numFaultKinds]string{"error", "hang", "die", "garbage", "cut", "stall", "error_event", "kv_pull_fail", "reset_cache_silently"}

// metrics holds the worker's counters; gauges are read from the scheduler
// at scrape time. The exposition is written by hand in the Prometheus text
// format (see the package doc for why). All fields are atomics.
type metrics struct {
	prefixQueries    atomic.Uint64 // prompt tokens looked up in the prefix cache
	prefixHits       atomic.Uint64 // of those, found
	promptTokens     atomic.Uint64
	generationTokens atomic.Uint64
	prefillTokens    atomic.Uint64 // uncached prompt tokens computed
	prefillNanos     atomic.Uint64 // modelled prefill compute time
	transferTokens   atomic.Uint64 // KV tokens pulled from context workers
	transferSkipped  atomic.Uint64 // KV tokens a pull skipped (already held)
	transferNanos    atomic.Uint64 // modelled transfer time
	pulls            atomic.Uint64 // pins handed to a generation worker
	pinsExpired      atomic.Uint64
	requests         [3][numOutcomes]atomic.Uint64 // by phase
	faults           [numFaultKinds]atomic.Uint64
}

func (m *metrics) request(p phase, o outcome) { m.requests[p][o].Add(1) }

func (m *metrics) addDuration(c *atomic.Uint64, d time.Duration) {
	if d > 0 {
		c.Add(uint64(d))
	}
}

// write renders the exposition for st, for a worker serving model with a
// KV cache of cacheTokens in blocks of blockSize tokens.
func (m *metrics) write(w io.Writer, model string, cacheTokens int64, blockSize int, st schedStats) {
	e := expo{w: w, labels: `model_name="` + escapeLabel(model) + `"`}
	e.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", float64(st.Running))
	e.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", float64(st.Waiting))
	e.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", st.KV.Usage())
	e.counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", m.prefixQueries.Load())
	e.counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", m.prefixHits.Load())
	e.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", m.promptTokens.Load())
	e.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", m.generationTokens.Load())

	e.header("duet_sim_kv_blocks", "KV cache blocks by state.", "gauge")
	for _, b := range []struct {
		state string
		n     int
	}{{"referenced", st.KV.Referenced}, {"cached", st.KV.Cached}, {"free", st.KV.Free}} {
		e.sample("duet_sim_kv_blocks", `state="`+b.state+`"`, float64(b.n))
	}
	e.gauge("duet_sim_kv_capacity_blocks", "KV cache capacity in blocks.", float64(st.KV.Capacity))
	e.gauge(capacityTokensMetric, "KV cache capacity in tokens.", float64(cacheTokens))
	e.gauge(blockSizeMetric, "KV cache block size in tokens.", float64(blockSize))
	e.gauge("duet_sim_kv_pins", "Context-side KV handles waiting to be pulled.", float64(st.Pins))
	e.counter("duet_sim_kv_pins_expired_total", "KV handles that expired before a pull.", m.pinsExpired.Load())
	e.counter("duet_sim_kv_pulls_total", "KV handles pulled by generation workers.", m.pulls.Load())
	e.counter("duet_sim_kv_transfer_tokens_total", "KV tokens pulled from context workers.", m.transferTokens.Load())
	e.counter("duet_sim_kv_transfer_skipped_tokens_total", "KV tokens a pull did not transfer because this worker held them.", m.transferSkipped.Load())
	e.counterF("duet_sim_kv_transfer_seconds_total", "Modelled KV transfer time.", float64(m.transferNanos.Load())/1e9)
	e.counter("duet_sim_prefill_computed_tokens_total", "Uncached prompt tokens prefilled.", m.prefillTokens.Load())
	e.counterF("duet_sim_prefill_seconds_total", "Modelled prefill compute time.", float64(m.prefillNanos.Load())/1e9)

	e.header("duet_sim_requests_total", "Completion requests by phase and outcome.", "counter")
	for p := range m.requests {
		for o := range m.requests[p] {
			e.sample("duet_sim_requests_total", `phase="`+phase(p).String()+`",outcome="`+outcomeNames[o]+`"`, float64(m.requests[p][o].Load()))
		}
	}
	e.header("duet_sim_faults_injected_total", "Injected faults by kind.", "counter")
	for k := range m.faults {
		e.sample("duet_sim_faults_injected_total", `kind="`+faultNames[k]+`"`, float64(m.faults[k].Load()))
	}
}

// expo writes Prometheus text format 0.0.4; every sample carries labels.
type expo struct {
	w      io.Writer
	labels string
}

func (e expo) header(name, help, typ string) {
	fmt.Fprintf(e.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (e expo) sample(name, extra string, v float64) {
	l := e.labels
	if extra != "" {
		l += "," + extra
	}
	fmt.Fprintf(e.w, "%s{%s} %s\n", name, l, strconv.FormatFloat(v, 'g', -1, 64))
}

func (e expo) gauge(name, help string, v float64) {
	e.header(name, help, "gauge")
	e.sample(name, "", v)
}

func (e expo) counter(name, help string, v uint64) { e.counterF(name, help, float64(v)) }

func (e expo) counterF(name, help string, v float64) {
	e.header(name, help, "counter")
	e.sample(name, "", v)
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// writeKVEventMetrics renders the KV event counters; with k nil (KV events
// off) every count is 0.
func writeKVEventMetrics(w io.Writer, model string, k *kvEventSink) {
	c := &kvEventCounters{}
	if k != nil {
		c = &k.stats
	}
	e := expo{w: w, labels: `model_name="` + escapeLabel(model) + `"`}
	for _, m := range []struct {
		name, help                         string
		published, dropped, failed, paused *atomic.Uint64
	}{
		{"duet_sim_kv_event_batches_total", "KV event batches by outcome: published, dropped (publisher queue full), failed (send error), paused (discarded under the kv_events_paused fault).",
			&c.publishedBatches, &c.droppedBatches, &c.failedBatches, &c.pausedBatches},
		{"duet_sim_kv_events_total", "KV events by outcome: published, dropped (publisher queue full), failed (send error), paused (discarded under the kv_events_paused fault).",
			&c.publishedEvents, &c.droppedEvents, &c.failedEvents, &c.pausedEvents},
	} {
		e.header(m.name, m.help, "counter")
		e.sample(m.name, `outcome="published"`, float64(m.published.Load()))
		e.sample(m.name, `outcome="dropped"`, float64(m.dropped.Load()))
		e.sample(m.name, `outcome="failed"`, float64(m.failed.Load()))
		e.sample(m.name, `outcome="paused"`, float64(m.paused.Load()))
	}
}
