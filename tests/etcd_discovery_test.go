package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/duet-serve/duet/workers/discovery/etcdtest"
	"github.com/stretchr/testify/require"
)

// registerTRTLLM registers a worker in etcd as TensorRT-LLM's
// DisaggClusterWorker does and returns its worker id and lease.
func registerTRTLLM(srv *etcdtest.Server, cluster, workerURL string, role int) (string, int64) {
	hostPort := strings.TrimPrefix(workerURL, "http://")
	host, port, _ := strings.Cut(hostPort, ":")
	name := map[int]string{0: "CONTEXT", 1: "GENERATION"}[role]
	id := fmt.Sprintf("%s-%s-1735689600123-4242-007", name, hostPort)
	value := fmt.Sprintf(`{"worker_id": %q, "host": %q, "port": %s, "role": %d}`, id, host, port, role)
	return id, srv.Put("/trtllm-disagg/"+cluster+"/workers/"+id, value, 60*time.Second)
}

// TensorRT-LLM's service-discovery set-up, unchanged: a disagg_config.yaml
// with disagg_cluster, workers that register themselves in etcd.
func TestServeFindsWorkersRegisteredInEtcd(t *testing.T) {
	etcd := etcdtest.Start(t)
	ctx := startSim(t, "--role", "context", "--protocol", "trtllm")
	gen := startSim(t, "--role", "generation", "--protocol", "trtllm")
	gen2 := startSim(t, "--role", "generation", "--protocol", "trtllm")
	port := freePorts(t, 1)[0]
	cfg := fmt.Sprintf(`hostname: 127.0.0.1
port: %d
backend: pytorch
disagg_cluster:
  cluster_uri: %s
  cluster_name: test_cluster
  heartbeat_interval_sec: 1
  inactive_timeout_sec: 3
context_servers: {router: {type: round_robin}}
generation_servers: {router: {type: round_robin}}
`, port, strings.Replace(etcd.URL, "http://", "etcd://", 1))
	ctxID, _ := registerTRTLLM(etcd, "test_cluster", ctx, 0)
	genID, genLease := registerTRTLLM(etcd, "test_cluster", gen, 1)
	registerTRTLLM(etcd, "another_cluster", gen2, 1)
	p := startDuet(t, "serve", "--config", writeFile(t, "disagg_config.yaml", cfg))
	d := &deployment{url: fmt.Sprintf("http://127.0.0.1:%d", port), proc: p}
	waitHTTP(t, p, d.url+"/health", 60*time.Second)
	code, hdr, body := d.chat(t, false, "found through etcd", "")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, ctxID, hdr.Get("X-Duet-Ctx-Worker"))
	require.Equal(t, genID, hdr.Get("X-Duet-Gen-Worker"))
	require.Len(t, d.cluster(t).Workers, 2, "another cluster's workers are not this one's")

	// A worker that registers later joins; one whose lease ends leaves.
	gen2ID, _ := registerTRTLLM(etcd, "test_cluster", gen2, 1)
	etcd.Revoke(genLease)
	require.Eventually(t, func() bool {
		h := d.healthyIDs(t)
		return h[gen2ID] && !h[genID] && len(d.cluster(t).Workers) == 2
	}, 20*time.Second, 20*time.Millisecond)
	code, hdr, _ = d.chat(t, false, "after the change", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, gen2ID, hdr.Get("X-Duet-Gen-Worker"))
	d.requireIdle(t)
}
