package tests

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// workersYAML is a workers file listing ctx and gen sims by URL.
func workersYAML(ctx map[string]string, gen map[string]string) string {
	doc := "workers:\n"
	for id, url := range ctx {
		doc += fmt.Sprintf("  - {id: %s, url: %q, role: context}\n", id, url)
	}
	for id, url := range gen {
		doc += fmt.Sprintf("  - {id: %s, url: %q, role: generation}\n", id, url)
	}
	return doc
}

// workerIDs is /cluster_info's worker IDs that are healthy.
func (d *deployment) healthyIDs(t *testing.T) map[string]bool {
	ids := map[string]bool{}
	for _, w := range d.cluster(t).Workers {
		if w.Healthy {
			ids[w.ID] = true
		}
	}
	return ids
}

func TestWorkersFileDrivesMembership(t *testing.T) {
	ctx := startSim(t, "--role", "context", "--protocol", "trtllm")
	gen1 := startSim(t, "--role", "generation", "--protocol", "trtllm")
	gen2 := startSim(t, "--role", "generation", "--protocol", "trtllm")
	file := filepath.Join(t.TempDir(), "workers.yaml")
	require.NoError(t, os.WriteFile(file, []byte(workersYAML(map[string]string{"ctx-a": ctx}, map[string]string{"gen-a": gen1})), 0o644))
	port := freePorts(t, 1)[0]
	cfg := fmt.Sprintf(`
log: {level: info}
server: {host: 127.0.0.1, port: %d}
orchestrator: {protocol: trtllm}
router: {policy: least-load}
queue: {enabled: false}
fleet:
  workers_file: %q
  workers_file_interval: 20ms
  health_interval: 50ms
  context: {engine: trtllm, count: 0}
  generation: {engine: trtllm, count: 0}
`, port, file)
	d := &deployment{url: fmt.Sprintf("http://127.0.0.1:%d", port), proc: startDuet(t, "serve", "--config", writeFile(t, "duet.yaml", cfg))}
	waitHTTP(t, d.proc, d.url+"/health", 60*time.Second)
	require.Eventually(t, func() bool { h := d.healthyIDs(t); return h["ctx-a"] && h["gen-a"] }, 10*time.Second, 20*time.Millisecond)
	code, hdr, body := d.chat(t, false, "hello from the file", "")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, "gen-a", hdr.Get("X-Duet-Gen-Worker"))

	// A new generation worker, then the first one gone: no restart.
	require.NoError(t, os.WriteFile(file, []byte(workersYAML(map[string]string{"ctx-a": ctx}, map[string]string{"gen-b": gen2})), 0o644))
	require.Eventually(t, func() bool { h := d.healthyIDs(t); return h["gen-b"] && !h["gen-a"] }, 10*time.Second, 20*time.Millisecond)
	require.Len(t, d.cluster(t).Workers, 2)
	code, hdr, _ = d.chat(t, false, "hello again", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "gen-b", hdr.Get("X-Duet-Gen-Worker"))

	// A broken file changes nothing, and says why.
	require.NoError(t, os.WriteFile(file, []byte("workers: [{id: gen-c, url: \"http://x:1\", role: decode}]\n"), 0o644))
	require.Eventually(t, func() bool { return strings.Contains(d.proc.output(), "workers file not applied") }, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, d.proc.output(), "workers[0].role")
	require.Len(t, d.cluster(t).Workers, 2)
	code, _, _ = d.chat(t, false, "still served", "")
	require.Equal(t, http.StatusOK, code)
	d.requireIdle(t)
}

func TestWorkersFileThatCannotBeReadFailsTheStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "workers.yaml")
	require.NoError(t, os.WriteFile(file, []byte("workers: [{id: a, url: nowhere, role: context}]\n"), 0o644))
	cfg := fmt.Sprintf(`
server: {host: 127.0.0.1, port: %d}
fleet:
  workers_file: %q
  context: {engine: trtllm, count: 0}
  generation: {engine: trtllm, count: 0}
`, freePorts(t, 1)[0], file)
	p := startDuet(t, "serve", "--config", writeFile(t, "duet.yaml", cfg))
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("duet serve did not exit")
	}
	require.Contains(t, p.output(), "config: fleet.workers_file: "+file+": workers[0].url")
}
