//go:build soak

package tests

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// soakOptions shape one scenario's `duet serve`.
type soakOptions struct {
	nCtx, nGen int      // workers per pool (default 2 and 2)
	simArgs    []string // `duet sim` flags for every worker, after the suite's
	ctxArgs    []string // flags for the context workers only
	server     string   // extra server keys, as YAML flow-mapping entries
	// orchestrator holds extra orchestrator keys, one "key: value" each.
	orchestrator []string
	// limit is duet's context_timeout, first_event_timeout and
	// stream_idle_timeout (default 10s); total its stream_total_timeout
	// (default 5m).
	limit, total time.Duration
}

// soakSimArgs let every sim run thousands of sequences at once.
var soakSimArgs = []string{"--max-num-seqs", "4096", "--max-waiting", "8192", "--kv-capacity-blocks", "100000"}

// soakDuet is a running `duet serve` under soak, with what the final checks
// compare against.
type soakDuet struct {
	*deployment
	client  *soakClient
	pid     int
	base    duetProbe // after warm-up
	sampler *rssSampler
}

// startSoak launches duet over a sim fleet, waits until every worker is up
// and healthy, warms it up and takes the baseline.
func startSoak(t *testing.T, o soakOptions) *soakDuet {
	t.Helper()
	if o.nCtx == 0 {
		o.nCtx, o.nGen = 2, 2
	}
	if o.limit == 0 {
		o.limit, o.total = 10*time.Second, 5*time.Minute
	}
	port := freePorts(t, 1)[0]
	ctxBase, genBase := freePortRun(t, o.nCtx), freePortRun(t, o.nGen)
	ctxSide, genSide := freePortRun(t, o.nCtx), freePortRun(t, o.nGen)
	args := append(append([]string(nil), soakSimArgs...), o.simArgs...)
	orch := ""
	for _, kv := range o.orchestrator {
		orch += "\n  " + kv
	}
	cfg := fmt.Sprintf(`
log: {level: warn}
server: {host: 127.0.0.1, port: %d%s}
orchestrator:
  protocol: trtllm
  context_timeout: %[3]s
  first_event_timeout: %[3]s
  stream_idle_timeout: %[3]s
  stream_total_timeout: %[4]s
  max_conns_per_worker: 8192%[14]s
router: {policy: conversation}
queue: {enabled: true, inflight_per_worker: 4096, max_queue_length: 8192, max_wait: 60s}
fleet:
  run_dir: %[5]s
  health_interval: 200ms
  unhealthy_threshold: 5
  health_timeout: 5s
  shutdown_grace: 3s
  context:
    engine: sim
    count: %d
    base_port: %d
    side_port_base: %d
    start_timeout: 60s
    args: [%s]
    restart: {attempts: 100000, interval: 60s, delay: 200ms, max_delay: 1s}
  generation:
    engine: sim
    count: %d
    base_port: %d
    side_port_base: %d
    start_timeout: 60s
    args: [%s]
    restart: {attempts: 100000, interval: 60s, delay: 200ms, max_delay: 1s}
`, port, o.server, o.limit, o.total, t.TempDir(), o.nCtx, ctxBase, ctxSide, yamlList(append(args, o.ctxArgs...)),
		o.nGen, genBase, genSide, yamlList(args), orch)
	p := startDuet(t, "serve", "--config", writeFile(t, "duet.yaml", cfg))
	d := &soakDuet{deployment: &deployment{url: fmt.Sprintf("http://127.0.0.1:%d", port), proc: p}, pid: p.cmd.Process.Pid}
	d.client = newSoakClient(d.url)
	waitHTTP(t, p, d.url+"/health", 90*time.Second)
	d.requireHealed(t, 60*time.Second)
	d.warmUp(t)
	base, err := probeDuet(d.url)
	require.NoError(t, err)
	d.base = base
	d.sampler = startRSSSampler(d.url, base.rss)
	t.Cleanup(d.sampler.stop)
	return d
}

func yamlList(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return strings.Join(q, ", ")
}

// warmUp runs a few requests of each kind, which must all be answered in
// full, so that the baseline counts the pools and caches a served duet
// keeps.
func (d *soakDuet) warmUp(t *testing.T) {
	t.Helper()
	var tl tally
	runPool(16, 8, func(i int) {
		o, detail := d.client.chat(-1-i, i%2 == 0, 8, time.Minute)
		tl.add(o, detail)
	})
	require.Equal(t, int64(16), tl.counts[outFull].Load(), "warm-up: %s", tl.summary())
	d.client.closeIdle()
}

// fleetWorker is a worker in /cluster_info's fleet view.
type fleetWorker struct {
	Name     string
	Role     string
	URL      string
	PID      int
	State    string
	Restarts int
}

// soakCluster is the part of /cluster_info the soak reads.
type soakCluster struct {
	Workers []struct {
		ID      string `json:"id"`
		Healthy bool   `json:"healthy"`
	} `json:"workers"`
	Fleet []fleetWorker `json:"fleet"`
}

func (d *soakDuet) clusterInfo() (soakCluster, error) {
	var c soakCluster
	resp, err := soakHTTP.Get(d.url + "/cluster_info")
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	return c, json.NewDecoder(resp.Body).Decode(&c)
}

// requireHealed waits until every launched worker is up and every worker
// healthy in the router.
func (d *soakDuet) requireHealed(t *testing.T, within time.Duration) soakCluster {
	t.Helper()
	var last soakCluster
	healed := eventually(within, 100*time.Millisecond, func() bool {
		c, err := d.clusterInfo()
		if err != nil {
			return false
		}
		last = c
		for _, w := range c.Fleet {
			if w.State != "up" {
				return false
			}
		}
		for _, w := range c.Workers {
			if !w.Healthy {
				return false
			}
		}
		return len(c.Fleet) > 0
	})
	require.True(t, healed, "fleet not healed within %s: %+v", within, last)
	return last
}

// goroutineSlack is how many goroutines above its warm-up baseline an idle
// duet may keep. Idle server workers and pooled upstream connections go
// within ~20 s, after which duet is usually below its baseline.
const goroutineSlack = 10

// finish waits (bounded) for duet to go idle, fills the row and checks
// what must hold after any scenario: no client hung, none got a broken
// answer or a connection closed without one, no lease or slot left charged,
// no sequence left on a worker, goroutines back near the baseline, duet
// never restarted, and no panic in its log.
// migrations reads duet_migrations_total: the streams migrated, and the
// others by "failure: outcome".
func (d *soakDuet) migrations(t *testing.T) (migrated float64, not map[string]float64) {
	t.Helper()
	not = map[string]float64{}
	require.NoError(t, scrape(d.url+"/metrics", func(name, labels string, v float64) {
		if name != "duet_migrations_total" || v == 0 {
			return
		}
		reason, outcome := labelValue(labels, "reason"), labelValue(labels, "outcome")
		if outcome == "migrated" {
			migrated += v
		} else {
			not[reason+": "+outcome] += v
		}
	}))
	return migrated, not
}

// labelValue returns the value of label name in a Prometheus label list.
func labelValue(labels, name string) string {
	_, v, _ := strings.Cut(labels, name+`="`)
	v, _, _ = strings.Cut(v, `"`)
	return v
}

func (d *soakDuet) finish(t *testing.T, row *soakRow, tl *tally) {
	t.Helper()
	tl.into(row)
	tl.log(t)
	d.client.closeIdle()
	var end duetProbe
	idle := eventually(2*time.Minute, 100*time.Millisecond, func() bool {
		p, err := probeDuet(d.url)
		end = p
		return err == nil && p.leases == 0 && p.load == 0 && p.slots == 0 && p.queued == 0
	})
	eventually(90*time.Second, 200*time.Millisecond, func() bool {
		p, err := probeDuet(d.url)
		if err == nil {
			end = p
		}
		return err == nil && p.goroutines <= d.base.goroutines+goroutineSlack
	})
	var seqs float64
	eventually(time.Minute, 200*time.Millisecond, func() bool {
		n, err := d.workerSeqs()
		seqs = n
		return err == nil && n == 0
	})
	d.sampler.stop()
	row.migrated, row.notMigrated = d.migrations(t)
	row.leases, row.slots, row.seqs = end.leases+end.load, end.slots+end.queued, seqs
	row.gorBase, row.gorEnd = d.base.goroutines, end.goroutines
	row.rssBase, row.rssPeak, row.rssEnd = d.base.rss, max(d.sampler.peak(), end.rss), end.rss
	if d.proc.exited() || !pidAlive(d.pid) || end.started != d.base.started {
		row.restart = 1
	}
	row.ran = true

	require.LessOrEqual(t, float64(row.counts[outErrorEvent]), sum(row.notMigrated),
		"streams ended in an error event although they could have been migrated")
	require.Zero(t, row.counts[outHung], "clients left hanging")
	require.Zero(t, row.counts[outBroken], "broken answers")
	require.Zero(t, row.counts[outClosed], "connections closed without an answer")
	require.True(t, idle, "leases or slots still charged: %+v", end)
	require.Zero(t, seqs, "workers still run or queue sequences")
	require.LessOrEqual(t, end.goroutines, d.base.goroutines+goroutineSlack, "goroutines did not come back")
	require.Zero(t, row.restart, "duet exited or restarted")
	require.NotContains(t, d.proc.output(), "panic", "a panic in duet's log")
}

// eventually polls cond every interval until it holds or within passes.
func eventually(within, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}

// killWorker SIGKILLs one of duet's workers (a process duet launched for
// this test).
func killWorker(w fleetWorker) error { return syscall.Kill(w.PID, syscall.SIGKILL) }
