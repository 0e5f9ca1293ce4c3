// Package redistest runs a real redis-server (the Debian package
// redis-server) on a free loopback port for tests: no persistence, its
// files in a temporary directory, stopped when the test ends.
package redistest

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
}

// Start runs redis-server on a free loopback port and stops it at the end
// of the test. It fails the test when redis-server is not installed (CI
// installs it: apt-get install redis-server).
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found (install the Debian package redis-server): %v", err)
	}
	s := &Server{t: t, port: freePort(t), dir: t.TempDir()}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's port.
func (s *Server) Port() int { return s.port }

// Stop kills the server (SIGKILL: as abrupt as a crash); safe to call
// twice.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts a stopped server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

func (s *Server) start() {
	s.t.Helper()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--loglevel", "warning",
		"--enable-debug-command", "local") // DEBUG SLEEP makes a slow store
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	s.t.Fatalf("redis-server did not listen on %s within 10s", s.Addr())
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(fmt.Errorf("free port: %w", err))
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
