//go:build soak

package tests

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lorisKind is how a slow client sends its request.
type lorisKind int

const (
	lorisIdle    lorisKind = iota // connects and sends nothing
	lorisHeaders                  // the headers a byte every 500 ms: never done within read_timeout
	lorisBody                     // the headers at once, then the body a byte every 500 ms
	lorisSlow                     // headers and body a byte every 10 ms: done well within read_timeout
	numLorisKinds
)

var lorisNames = [numLorisKinds]string{"idle", "header", "body", "slow-but-complete"}

// soakLoris (issue 12 c): for SOAK_LORIS_WINDOW (default 30 s), SOAK_LORIS
// slow clients (default 400: 100 idle, 150 sending headers and 100 bodies a
// byte at a time, 50 slow but complete) each reconnect as soon as duet ends
// their connection, while 8 normal clients keep sending requests. duet's
// server.read_timeout (10 s here, 60 s by default) must end every loris
// connection; the slow-but-complete and normal clients must be answered in
// full.
func soakLoris(t *testing.T, row *soakRow) {
	slots, window := soakEnv(t, "SOAK_LORIS", 400), soakEnvDuration(t, "SOAK_LORIS_WINDOW", 30*time.Second)
	const readTimeout = 10 * time.Second
	d := startSoak(t, soakOptions{server: fmt.Sprintf(", read_timeout: %s", readTimeout)})
	addr := strings.TrimPrefix(d.url, "http://")
	end := time.Now().Add(window)

	var tl, normal tally
	var mu sync.Mutex // guards longest and latencies
	longest := map[string]time.Duration{}
	var latencies []time.Duration
	var wg sync.WaitGroup
	kinds := lorisMix(slots)
	for i, kind := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; time.Now().Before(end); j++ {
				o, took, detail := loris(addr, kind, i*1000+j, readTimeout)
				tl.add(o, lorisNames[kind]+": "+detail)
				mu.Lock()
				longest[lorisNames[kind]] = max(longest[lorisNames[kind]], took)
				mu.Unlock()
				if o == outHung {
					return
				}
			}
		}()
	}
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; time.Now().Before(end); j++ {
				start := time.Now()
				o, detail := d.client.chat(1_000_000+c*100_000+j, j%2 == 0, 16, time.Minute)
				normal.add(o, "normal: "+detail)
				mu.Lock()
				latencies = append(latencies, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for o := range normal.counts {
		tl.counts[o].Add(normal.counts[o].Load())
	}
	slices.Sort(latencies)
	var p50, p99 time.Duration
	if len(latencies) > 0 {
		p50, p99 = latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	}
	row.note("read_timeout %s; longest slow connection by kind: %s; normal clients meanwhile %d/%d answered fully (latency p50 %s, p99 %s)",
		readTimeout, formatCounts(roundAll(longest)), normal.counts[outFull].Load(), len(latencies), p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	normal.log(t)
	d.finish(t, row, &tl)
	require.Equal(t, int64(len(latencies)), normal.counts[outFull].Load(), "normal clients: %s", normal.summary())
	require.Less(t, longest[lorisNames[lorisHeaders]], readTimeout+30*time.Second)
}

// lorisMix spreads n slow clients over the kinds: a quarter idle, 3/8
// sending headers, a quarter bodies, 1/8 slow but complete.
func lorisMix(n int) []lorisKind {
	kinds := make([]lorisKind, n)
	for i := range kinds {
		switch r := i % 8; {
		case r < 2:
			kinds[i] = lorisIdle
		case r < 5:
			kinds[i] = lorisHeaders
		case r < 7:
			kinds[i] = lorisBody
		default:
			kinds[i] = lorisSlow
		}
	}
	return kinds
}

func roundAll(m map[string]time.Duration) map[string]time.Duration {
	out := make(map[string]time.Duration, len(m))
	for k, v := range m {
		out[k] = v.Round(100 * time.Millisecond)
	}
	return out
}

// loris runs one slow connection until duet answers or closes it, and
// returns how it ended and how long that took. A connection duet neither
// answers nor closes within readTimeout + 30 s hung.
func loris(addr string, kind lorisKind, i int, readTimeout time.Duration) (outcome, time.Duration, string) {
	start := time.Now()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return outClosed, 0, err.Error()
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(start.Add(readTimeout + 30*time.Second))
	body := soakBody(i, false, 8)
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: duet\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		slowWrite(conn, kind, req, len(req)-len(body), stop)
	}()
	defer writer.Wait()
	defer close(stop)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	took := time.Since(start)
	switch {
	case err != nil && isTimeout(err):
		return outHung, took, fmt.Sprintf("neither answered nor closed within %s", readTimeout+30*time.Second)
	case err != nil:
		return outClosed, took, fmt.Sprintf("closed after %s: %v", took.Round(100*time.Millisecond), err)
	}
	defer resp.Body.Close()
	o, detail := judge(resp, false, 8, 0, isTimeout)
	return o, took, detail
}

// slowWrite sends req the way kind does, until stop or a write fails.
// headerLen is where the body starts.
func slowWrite(conn net.Conn, kind lorisKind, req string, headerLen int, stop <-chan struct{}) {
	from, gap := 0, 500*time.Millisecond
	switch kind {
	case lorisIdle:
		return
	case lorisBody:
		if _, err := conn.Write([]byte(req[:headerLen])); err != nil {
			return
		}
		from = headerLen
	case lorisSlow:
		gap = 10 * time.Millisecond
	}
	for k := from; k < len(req); k++ {
		if _, err := conn.Write([]byte{req[k]}); err != nil {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(gap):
		}
	}
}
