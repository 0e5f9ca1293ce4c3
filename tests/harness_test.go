package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// duetBin is the binary built once by TestMain.
var duetBin string

// duetRace builds duetBin with the race detector. The soak suite
// (soak_test.go, build tag soak) turns it off: its thousands of concurrent
// streams exceed the detector's limit of 8128 live goroutines.
var duetRace = true

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "duet-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	duetBin = filepath.Join(dir, "duet")
	args := []string{"build", "-o", duetBin}
	if duetRace {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "./cmd/duet")...)
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building duet:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// handedOut remembers every port the harness gave a test, so that two
// allocations in one test binary never overlap even though each releases
// its probe listeners at once.
var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{}
)

// freePorts returns n distinct free loopback ports never handed out before.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for len(ports) < n {
		base := freePortRun(t, 1)
		ports = append(ports, base)
	}
	return ports
}

// freePortRun returns the first of n consecutive free ports, none handed
// out before, and marks them handed out. Ports are drawn below the
// kernel's ephemeral range (32768-60999 by default): a port that probes
// free inside it can become the local port of any outgoing connection
// before the worker binds it, which a concurrent soak run's thousands of
// connections made happen. A random draw keeps test processes running side
// by side apart.
func freePortRun(t *testing.T, n int) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for try := 0; try < 1000; try++ {
		base := portsLow + rand.IntN(portsHigh-portsLow-n)
		if !runFree(base, n) {
			continue
		}
		for i := 0; i < n; i++ {
			handedOut[base+i] = true
		}
		return base
	}
	t.Fatal("no run of free ports")
	return 0
}

// The range freePortRun draws from.
const portsLow, portsHigh = 20000, 32700

// runFree reports whether ports base..base+n-1 were never handed out and
// can be bound now. The caller holds portsMu.
func runFree(base, n int) bool {
	for i := 0; i < n; i++ {
		if handedOut[base+i] {
			return false
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// process is a started duet process with its combined output.
type process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex // guards out
	out  bytes.Buffer
	done chan struct{}
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startDuet runs the duet binary with args in its own process group; the
// test's cleanup kills the group and waits.
func startDuet(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(duetBin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("output of duet %s:\n%s", strings.Join(args, " "), tail(p.output(), 60))
		}
	})
	return p
}

// signal sends sig to the process and waits up to d for it to exit.
func (p *process) stop(t *testing.T, sig syscall.Signal, d time.Duration) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("process did not exit within %s after %s", d, sig)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitHTTP polls url until it answers 200 or timeout.
func waitHTTP(t *testing.T, p *process, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p != nil && p.exited() {
			t.Fatalf("process exited while waiting for %s:\n%s", url, tail(p.output(), 40))
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not healthy within %s", url, timeout)
}

// post sends a JSON body and returns the status, headers and body.
func post(t *testing.T, url string, body string, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

// getJSON decodes a GET response into v and returns the status.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	return resp.StatusCode
}

// sseData returns the data payloads of an SSE body.
func sseData(body []byte) []string {
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "data: ") {
			out = append(out, strings.TrimPrefix(line, "data: "))
		}
	}
	return out
}

// writeFile writes content to a file in the test's temp dir.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

// pidAlive reports whether a process with pid exists (and is not a zombie
// we own).
func pidAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat))
	return len(fields) > 2 && fields[2] != "Z"
}
