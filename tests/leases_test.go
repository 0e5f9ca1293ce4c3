package tests

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeLeasesUnderFaultsAndCancellations runs many concurrent requests
// while workers fail (500s, streams dying midway) and clients hang up at
// random moments, then checks that every lease was refunded.
func TestServeLeasesUnderFaultsAndCancellations(t *testing.T) {
	d := startServe(t, serveOptions{nCtx: 2, nGen: 2})
	for _, w := range d.cluster(t).Fleet {
		faults := `{"error_rate":0.2}`
		if strings.HasPrefix(w.Name, "gen-") {
			faults = `{"error_rate":0.1,"die_rate":0.2,"die_after_tokens":3}`
		}
		code, _, body := post(t, w.URL+"/admin/faults", faults)
		require.Equal(t, http.StatusOK, code, string(body))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex // guards statuses
	statuses := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < 80; i++ {
		stream := i%2 == 0
		cancelAfter := time.Duration(rng.IntN(400)) * time.Millisecond
		cancelAt := rng.IntN(3) == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if cancelAt {
				time.AfterFunc(cancelAfter, cancel)
			}
			outcome := doRequest(ctx, d.url, stream, i)
			mu.Lock()
			statuses[outcome]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("outcomes: %v", statuses)
	require.Positive(t, statuses["200"], "some requests succeed despite the faults")
	d.requireIdle(t)
}

// doRequest sends one chat request and reports how it ended.
func doRequest(ctx context.Context, base string, stream bool, i int) string {
	body := fmt.Sprintf(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":%t,"max_tokens":40,"ignore_eos":true,
	  "messages":[{"role":"user","content":"request %d: tell me something"}]}`, stream, i)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "cancelled"
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return "cancelled mid-body"
	case resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"error"`):
		return "stream error event"
	}
	return fmt.Sprint(resp.StatusCode)
}
