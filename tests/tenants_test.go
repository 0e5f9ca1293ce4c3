package tests

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tenantRate is the tenant's input limit in the cluster test: 1,000 prompt
// tokens a second, with a bucket of one second of it.
const tenantRate = 60000

const tenantsYAML = `tenants:
  burst: 1s
  list:
    - {name: acme, api_keys: [sk-acme-0001], input_tokens_per_minute: 60000}
`

// Three replicas on one real Redis hold a tenant to its token rate: its
// clients offer about seven times the rate through every replica for a
// minute, and the prompt tokens the replicas admit in that minute are the
// limit within 5 %; the rest get 429 with Retry-After.
func TestClusterHoldsATenantsTokenRate(t *testing.T) {
	c := startCluster(t, 3, 1, 2, false, tenantsYAML)
	body := fmt.Sprintf(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":1,"prompt":%q}`,
		strings.Repeat("tokens for the rate limit test ", 16))
	var refused, answered, badRetryAfter atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, d := range c.replicas {
		wg.Go(func() { offer(d.url, body, stop, &answered, &refused, &badRetryAfter) })
	}
	time.Sleep(3 * time.Second) // past the first bucket: the steady state
	admitted := func() float64 {
		sum := 0.0
		for _, d := range c.replicas {
			sum += d.metricWith(t, "duet_tenant_tokens_total", `kind="input"`)
		}
		return sum
	}
	before, start := admitted(), time.Now()
	time.Sleep(60 * time.Second)
	after, elapsed := admitted(), time.Since(start)
	close(stop)
	wg.Wait()
	rate := (after - before) / elapsed.Minutes()
	t.Logf("admitted %.0f prompt tokens a minute (limit %d); %d answered, %d refused", rate, tenantRate, answered.Load(), refused.Load())
	require.InEpsilon(t, tenantRate, rate, 0.05)
	require.Positive(t, refused.Load(), "the offered load was over the limit")
	require.Zero(t, badRetryAfter.Load(), "every 429 carries Retry-After")
}

// offer sends body to url every 40 ms until stop is closed, counting the
// answers, the 429s and the 429s without a Retry-After.
func offer(url, body string, stop <-chan struct{}, answered, refused, badRetryAfter *atomic.Int64) {
	tick := time.NewTicker(40 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-acme-0001")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			answered.Add(1)
		case http.StatusTooManyRequests:
			refused.Add(1)
			if resp.Header.Get("Retry-After") == "" {
				badRetryAfter.Add(1)
			}
		}
	}
}
