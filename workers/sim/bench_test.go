package sim

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duet-serve/duet/tokenizer"
)

// The benchmarks run the worker in a child process (this test binary
// re-executed with benchChildEnv set) so that its CPU time can be read from
// /proc without the load generator's.
const benchChildEnv = "DUET_SIM_BENCH_CHILD_TIME_SCALE"

// runBenchChild serves one worker until stdin closes. It prints the URL.
func runBenchChild(scale string) int {
	cfg := Defaults()
	cfg.Port = 0
	cfg.MaxNumSeqs, cfg.MaxWaiting = 4096, 4096
	cfg.EOSProbability = 0
	ts, err := strconv.ParseFloat(scale, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.TimeScale = ts
	tok, err := tokenizer.New(tokenizer.Defaults())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := New(cfg, tok, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	fmt.Println("http://" + ln.Addr().String())
	if err := s.Serve(ctx, ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type benchChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	url   string
}

func startBenchChild(b *testing.B, scale string) *benchChild {
	b.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		b.Skip("needs /proc to read the worker's CPU time")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchChildEnv+"="+scale)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	c := &benchChild{cmd: cmd, stdin: stdin, url: strings.TrimSpace(line)}
	b.Cleanup(func() { _ = c.stdin.Close(); _ = c.cmd.Wait() })
	return c
}

// cpuTime returns the child's user+system CPU time from /proc.
func (c *benchChild) cpuTime(b *testing.B) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which may hold spaces) start at ") ".
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * (time.Second / 100) // CLK_TCK is 100 on Linux
}

// runStreams makes b.N streaming requests of tokens tokens each over
// streams concurrent connections and reports per-token and per-stream cost;
// perCore adds streams/core, which only means something when streams are
// paced.
func runStreams(b *testing.B, c *benchChild, streams, tokens int, perCore bool) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: streams}}
	defer client.CloseIdleConnections()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"benchmark"}],"stream":true,"max_tokens":%d,"ignore_eos":true}`, Defaults().Model, tokens)
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0, start := c.cpuTime(b), time.Now()
	for range streams {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				resp, err := client.Post(c.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	wall, cpu := time.Since(start), c.cpuTime(b)-cpu0
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d requests failed", failed.Load())
	}
	total := float64(b.N * tokens)
	b.ReportMetric(total/wall.Seconds(), "tokens/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/total, "worker-cpu-ns/token")
	cores := cpu.Seconds() / wall.Seconds()
	b.ReportMetric(cores, "worker-cores")
	if perCore && cores > 0 {
		b.ReportMetric(float64(streams)/cores, "streams/core")
	}
}

// BenchmarkStreamsRealTime: streams concurrent streaming sequences paced at
// real time (time_scale 1, ITL 7 ms + 50 us per running sequence); reports
// the worker's CPU use and how many such sequences one core sustains.
//
//	go test -run '^$' -bench BenchmarkStreamsRealTime -benchtime 2000x ./workers/sim/
func BenchmarkStreamsRealTime(b *testing.B) {
	c := startBenchChild(b, "1")
	for _, streams := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) { runStreams(b, c, streams, 64, true) })
	}
}

// BenchmarkStreamsUnpaced: no modelled delays (time_scale 0), so the worker
// runs flat out; reports its CPU cost per streamed token.
//
//	go test -run '^$' -bench BenchmarkStreamsUnpaced -benchtime 2000x ./workers/sim/
func BenchmarkStreamsUnpaced(b *testing.B) {
	c := startBenchChild(b, "0")
	b.Run("streams=64", func(b *testing.B) { runStreams(b, c, 64, 256, false) })
}
