package tests

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duet-serve/duet/router/redisstore/redistest"
	"github.com/stretchr/testify/require"
)

// cluster is several `duet serve` replicas over one fleet of sims, sharing
// state through one real Redis.
type cluster struct {
	redis    *redistest.Server
	replicas []*deployment
}

const clusterToken = "s3cret"

// startCluster starts redis-server, nCtx + nGen sims and n replicas with
// cluster.state redis (or local when local is true); extra is YAML
// appended to every replica's configuration.
func startCluster(t *testing.T, n, nCtx, nGen int, local bool, extra ...string) *cluster {
	t.Helper()
	c := &cluster{redis: redistest.Start(t)}
	var ctx, gen []string
	for i := 0; i < nCtx; i++ {
		ctx = append(ctx, fmt.Sprintf("%q", startSim(t, "--role", "context", "--protocol", "trtllm")))
	}
	for i := 0; i < nGen; i++ {
		gen = append(gen, fmt.Sprintf("%q", startSim(t, "--role", "generation", "--protocol", "trtllm")))
	}
	state := "redis"
	if local {
		state = "local"
	}
	ports := freePorts(t, n)
	for i := 0; i < n; i++ {
		cfg := fmt.Sprintf(`
log: {level: info}
server: {host: 127.0.0.1, port: %d, admin_token: %s}
orchestrator: {protocol: trtllm, max_local_prefill_tokens: 0}
router: {policy: conversation}
queue: {enabled: false}
cluster:
  state: %s
  load_interval: 20ms
  redis: {address: %q, timeout: 200ms}
fleet:
  health_interval: 100ms
  context: {engine: trtllm, urls: [%s], health_path: /health}
  generation: {engine: trtllm, urls: [%s], health_path: /health}
%s`, ports[i], clusterToken, state, c.redis.Addr(), strings.Join(ctx, ", "), strings.Join(gen, ", "), strings.Join(extra, "\n"))
		p := startDuet(t, "serve", "--config", writeFile(t, fmt.Sprintf("replica-%d.yaml", i), cfg))
		d := &deployment{url: fmt.Sprintf("http://127.0.0.1:%d", ports[i]), proc: p}
		waitHTTP(t, p, d.url+"/health", 60*time.Second)
		c.replicas = append(c.replicas, d)
	}
	if !local {
		c.requireStoreUp(t)
	}
	return c
}

// metric returns the sum of a metric's samples on one replica.
func (d *deployment) metric(t *testing.T, name string) float64 {
	t.Helper()
	sum := 0.0
	require.NoError(t, scrape(d.url+"/metrics", func(n, _ string, v float64) {
		if n == name {
			sum += v
		}
	}))
	return sum
}

// requireStoreUp waits until every replica reaches Redis.
func (c *cluster) requireStoreUp(t *testing.T) {
	t.Helper()
	for _, d := range c.replicas {
		require.Eventually(t, func() bool { return d.metric(t, "duet_cluster_store_up") == 1 }, 20*time.Second, 20*time.Millisecond)
	}
}

// turns sends turns of one conversation, turn i through replica i mod n,
// each turn extending the previous prompt and reply, and returns them.
func (c *cluster) turns(t *testing.T, topic string, n int, headers ...string) []chatTurn {
	t.Helper()
	msgs := []message{{Role: "system", Content: systemPrompt}}
	var out []chatTurn
	for i := 0; i < n; i++ {
		msgs = append(msgs, message{Role: "user", Content: fmt.Sprintf("Tell me about %s, part %d, in some detail please.", topic, i)})
		turn := converse(t, c.replicas[i%len(c.replicas)], msgs, headers...)
		require.Equal(t, http.StatusOK, turn.status, "turn %d of %s", i, topic)
		msgs = append(msgs, message{Role: "assistant", Content: turn.reply})
		out = append(out, turn)
	}
	return out
}

func TestClusterSessionsKeepTheirPairAcrossReplicas(t *testing.T) {
	c := startCluster(t, 3, 2, 2, false)
	for s := 0; s < 6; s++ {
		topic := fmt.Sprint("river ", s)
		turns := c.turns(t, topic, 6, "X-Session-ID", fmt.Sprint("conv-", s))
		for i, turn := range turns {
			require.Equal(t, turns[0].ctx+"/"+turns[0].gen, turn.ctx+"/"+turn.gen, "%s turn %d", topic, i)
			if i > 0 {
				require.Equal(t, "sticky", turn.route, "%s turn %d", topic, i)
				require.Positive(t, turn.usage.cached(), "%s turn %d reuses the cache", topic, i)
			}
		}
	}
	for _, d := range c.replicas {
		require.Zero(t, d.metric(t, "duet_router_store_fallbacks_total"))
		d.requireIdle(t)
	}
}

// turnsLearned is turns, sending each turn once the replica that gets it
// has learned where the previous one left its prompt (the replicas tell
// each other when a request ends; a user answers later than that).
func (c *cluster) turnsLearned(t *testing.T, topic string, n int) []chatTurn {
	t.Helper()
	msgs := []message{{Role: "system", Content: systemPrompt}}
	var out []chatTurn
	for i := 0; i < n; i++ {
		d, next := c.replicas[i%len(c.replicas)], c.replicas[(i+1)%len(c.replicas)]
		before := map[string]int{}
		for _, w := range next.cluster(t).Workers {
			before[w.ID] = w.IndexedBlocks
		}
		msgs = append(msgs, message{Role: "user", Content: fmt.Sprintf("Tell me about %s, part %d, in some detail please.", topic, i)})
		turn := converse(t, d, msgs)
		require.Equal(t, http.StatusOK, turn.status, "turn %d of %s", i, topic)
		msgs = append(msgs, message{Role: "assistant", Content: turn.reply})
		out = append(out, turn)
		require.Eventually(t, func() bool { return next.indexed(t, turn.ctx) > before[turn.ctx] }, 10*time.Second, 5*time.Millisecond,
			"turn %d of %s reaches the next replica", i, topic)
	}
	return out
}

func TestClusterContinuationWithoutIDAcrossReplicas(t *testing.T) {
	c := startCluster(t, 3, 2, 2, false)
	for s := 0; s < 4; s++ {
		topic := fmt.Sprint("mountain ", s)
		turns := c.turnsLearned(t, topic, 5) // no id: duet mints one on turn 0
		require.NotEmpty(t, turns[0].session)
		for i, turn := range turns[1:] {
			require.Equal(t, "cached", turn.route, "%s turn %d: a replica that never saw the previous turn knows where it is cached", topic, i+1)
			require.Equal(t, turns[0].ctx, turn.ctx, "%s turn %d", topic, i+1)
			require.Positive(t, turn.usage.cached(), "%s turn %d reuses the cache", topic, i+1)
		}
		// The id replica 0 minted is valid on the others.
		for _, d := range c.replicas[1:] {
			code, hdr, body := d.chat(t, false, "a new question in the same session", "", "X-Session-ID", turns[0].session)
			require.Equal(t, http.StatusOK, code, string(body))
			require.Equal(t, "sticky", hdr.Get("X-Duet-Route"))
			require.Equal(t, turns[0].ctx+"/"+turns[0].gen, hdr.Get("X-Duet-Ctx-Worker")+"/"+hdr.Get("X-Duet-Gen-Worker"))
		}
	}
}

func TestClusterAdminRemovalReachesEveryReplica(t *testing.T) {
	c := startCluster(t, 3, 2, 2, false)
	api := c.replicas[0].url + "/admin/workers"
	require.Equal(t, http.StatusOK, adminCall(t, http.MethodDelete, api+"/ctx-0", clusterToken, ""))
	for i, d := range c.replicas {
		require.Eventually(t, func() bool {
			for _, w := range d.cluster(t).Workers {
				if w.ID == "ctx-0" {
					return false
				}
			}
			return true
		}, 10*time.Second, 20*time.Millisecond, "replica %d still routes to ctx-0", i)
		for j := 0; j < 4; j++ {
			code, hdr, body := d.chat(t, false, fmt.Sprint("after removal ", i, j), "")
			require.Equal(t, http.StatusOK, code, string(body))
			require.Equal(t, "ctx-1", hdr.Get("X-Duet-Ctx-Worker"))
		}
	}
}

func TestClusterSurvivesRedisLossAndRecovers(t *testing.T) {
	c := startCluster(t, 3, 2, 2, false)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	defer halt() // the senders stop before the replicas do, whatever fails
	failures := make(chan string, 100)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d := c.replicas[i%len(c.replicas)]
				code, _, body := d.chat(t, i%2 == 0, fmt.Sprint("load ", w, " turn ", i), "", "X-Session-ID", fmt.Sprint("load-", w))
				if code != http.StatusOK {
					failures <- fmt.Sprintf("%d %s", code, body)
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	c.redis.Stop()
	for _, d := range c.replicas {
		require.Eventually(t, func() bool { return d.metric(t, "duet_cluster_store_up") == 0 }, 10*time.Second, 20*time.Millisecond)
	}
	require.Eventually(t, func() bool {
		for _, d := range c.replicas {
			if d.metric(t, "duet_router_store_fallbacks_total") == 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "every replica counts its fallbacks")

	// While Redis is down the replicas still agree on a session's pair
	// (a turn may spill away from it: the senders above load the workers).
	pairs := map[string]int{}
	for _, turn := range c.turns(t, "lake", 6, "X-Session-ID", "while-down") {
		if !strings.HasPrefix(turn.route, "spill") {
			pairs[turn.ctx+"/"+turn.gen]++
		}
	}
	require.Len(t, pairs, 1, "rendezvous hashing: %v", pairs)

	c.redis.Restart()
	c.requireStoreUp(t)
	halt()
	close(failures)
	for f := range failures {
		t.Errorf("a request failed while the store went away: %s", f)
	}
	for _, d := range c.replicas {
		require.Contains(t, d.proc.output(), "shared store unreachable")
		require.Contains(t, d.proc.output(), "shared store reachable")
	}
	// The senders' last loads, published just before they stopped, must be
	// gone from every replica's view (ctx spills follow load), then turns
	// stay on their pair through shared state.
	for _, d := range c.replicas {
		d.requireIdle(t)
	}
	back := c.turns(t, "sea", 6, "X-Session-ID", "after-recovery")
	sticky := 0
	for _, turn := range back[1:] {
		// A turn may spill: a replica can route it before the previous
		// turn's end (what the pinned worker holds, its lease refunded)
		// has reached the store. The pin stays, so the next turn goes home.
		if strings.HasPrefix(turn.route, "spill") {
			continue
		}
		sticky++
		require.Equal(t, "sticky", turn.route)
		require.Equal(t, back[0].ctx+"/"+back[0].gen, turn.ctx+"/"+turn.gen, "shared state again")
	}
	require.GreaterOrEqual(t, sticky, 3, "most turns of %v stay on their pair", back)
	for _, d := range c.replicas {
		d.requireIdle(t)
	}
}
