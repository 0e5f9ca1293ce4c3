//go:build soak

package tests

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// vanishPoint is where a vanishing client closes its connection.
type vanishPoint int

const (
	midHeaders    vanishPoint = iota // part of the request headers sent
	midBody                          // headers and part of the body sent
	afterRequest                     // the whole request sent, closed at once
	duringPrefill                    // closed 0-300 ms after the request (a 200 ms context phase)
	afterHeaders                     // the response headers read (streams), or 0.3-1.3 s into the answer
	afterFirst                       // the first event read
	midStream                        // 2 to maxTokens-2 events read
	stays                            // a control: reads the whole answer
	numVanishPoints
)

var vanishNames = [numVanishPoints]string{"mid-headers", "mid-body", "after-request", "during-prefill",
	"after-headers", "after-first-event", "mid-stream", "stays"}

// soakVanish (issue 12 b): SOAK_VANISH clients (default 1,000), 64 at a
// time, half streaming, each closing its TCP connection at a random point
// (vanishPoint), half of them with a reset instead of a FIN. Controls that
// stay must get full answers; nothing may stay charged.
func soakVanish(t *testing.T, row *soakRow) {
	n := soakEnv(t, "SOAK_VANISH", 1000)
	const maxTokens = 64
	d := startSoak(t, soakOptions{simArgs: []string{"--itl-base", "20ms"}, ctxArgs: []string{"--prefill-overhead", "200ms"}})
	before, _ := sample(t, d.deployment, `duet_requests_total{endpoint="chat",status="499"}`)
	addr := strings.TrimPrefix(d.url, "http://")
	var tl tally
	var mu sync.Mutex // guards byPoint
	byPoint := map[string]int{}
	runPool(n, 64, func(i int) {
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		stream, point := i%2 == 0, vanishPoint(rng.IntN(int(numVanishPoints)))
		if !stream && (point == afterFirst || point == midStream) {
			point = afterHeaders // a JSON answer has no events: leave while it is computed
		}
		o, detail := vanish(addr, i, stream, maxTokens, point, rng)
		if detail != "" {
			detail = vanishNames[point] + ": " + detail
		}
		tl.add(o, detail)
		mu.Lock()
		byPoint[vanishNames[point]]++
		mu.Unlock()
	})
	after, _ := sample(t, d.deployment, `duet_requests_total{endpoint="chat",status="499"}`)
	row.note("clients per vanishing point: %s; %d requests recorded as 499 (client closed)", formatCounts(byPoint), int(after-before))
	d.finish(t, row, &tl)
	require.Positive(t, tl.counts[outClientLeft].Load())
}

// vanish sends request i on its own connection and closes it at point.
func vanish(addr string, i int, stream bool, maxTokens int, point vanishPoint, rng *rand.Rand) (outcome, string) {
	const deadline = time.Minute
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return outClosed, err.Error()
	}
	defer conn.Close()
	if rng.IntN(2) == 0 {
		_ = conn.(*net.TCPConn).SetLinger(0) // close with a reset
	}
	_ = conn.SetDeadline(time.Now().Add(deadline))
	body := soakBody(i, stream, maxTokens)
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: duet\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	pause := func(maxMs int) { time.Sleep(time.Duration(rng.IntN(maxMs+1)) * time.Millisecond) }
	switch point {
	case midHeaders:
		_, _ = conn.Write([]byte(head[:1+rng.IntN(len(head)-1)]))
		pause(100)
		return outClientLeft, ""
	case midBody:
		_, _ = conn.Write([]byte(head + body[:1+rng.IntN(len(body)-1)]))
		pause(100)
		return outClientLeft, ""
	}
	if _, err := conn.Write([]byte(head + body)); err != nil {
		return outClosed, err.Error()
	}
	switch point {
	case afterRequest:
		return outClientLeft, ""
	case duringPrefill:
		pause(300)
		return outClientLeft, ""
	case afterHeaders:
		if !stream {
			time.Sleep(300*time.Millisecond + time.Duration(rng.IntN(1000))*time.Millisecond)
			return outClientLeft, ""
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		if isTimeout(err) {
			return outHung, "no response within the deadline"
		}
		return outClosed, err.Error()
	}
	defer resp.Body.Close()
	leaveAfter := 0
	switch point {
	case afterHeaders:
		if resp.StatusCode == http.StatusOK {
			return outClientLeft, ""
		}
	case afterFirst:
		leaveAfter = 1
	case midStream:
		leaveAfter = 2 + rng.IntN(maxTokens-3)
	}
	return judge(resp, stream, maxTokens, leaveAfter, isTimeout)
}
