// Package etcdtest runs a real etcd (the Debian package etcd-server) on
// free loopback ports for tests, with its data in a temporary directory,
// stopped when the test ends, and writes keys through etcd's v3 JSON
// gateway as a registering worker would.
package etcdtest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"
)

// Server is one etcd process.
type Server struct {
	t   testing.TB
	URL string // client URL, http://127.0.0.1:port
	cmd *exec.Cmd
}

// Start runs etcd and stops it at the end of the test. It fails the test
// when etcd is not installed (CI installs it: apt-get install etcd-server).
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Fatalf("etcd not found (install the Debian package etcd-server): %v", err)
	}
	client, peer := freePort(t), freePort(t)
	s := &Server{t: t, URL: fmt.Sprintf("http://127.0.0.1:%d", client)}
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	s.cmd = exec.Command("etcd", "--name", "duet-test", "--data-dir", t.TempDir(),
		"--listen-client-urls", s.URL, "--advertise-client-urls", s.URL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "duet-test="+peerURL, "--log-level", "error")
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(func() { _ = s.cmd.Process.Kill(); _ = s.cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(s.URL + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("etcd did not become healthy at %s within 20s", s.URL)
	return nil
}

// Put writes key = value, with a lease of ttl when ttl > 0 (as TensorRT-LLM
// workers register); it returns the lease id (0 without one).
func (s *Server) Put(key, value string, ttl time.Duration) int64 {
	s.t.Helper()
	body := map[string]any{"key": b64(key), "value": b64(value)}
	var lease int64
	if ttl > 0 {
		var out struct {
			ID string `json:"ID"`
		}
		s.call("/v3/lease/grant", map[string]any{"TTL": int64(ttl.Seconds())}, &out)
		if _, err := fmt.Sscan(out.ID, &lease); err != nil {
			s.t.Fatalf("lease grant: %v", err)
		}
		body["lease"] = lease
	}
	s.call("/v3/kv/put", body, nil)
	return lease
}

// Delete removes key.
func (s *Server) Delete(key string) {
	s.t.Helper()
	s.call("/v3/kv/deleterange", map[string]any{"key": b64(key)}, nil)
}

// Revoke ends a lease (its keys go, as when a worker stops renewing it).
func (s *Server) Revoke(lease int64) {
	s.t.Helper()
	s.call("/v3/lease/revoke", map[string]any{"ID": lease}, nil)
}

func (s *Server) call(path string, body any, out any) {
	s.t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := http.Post(s.URL+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		s.t.Fatalf("etcd %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("etcd %s: status %d", path, resp.StatusCode)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			s.t.Fatalf("etcd %s: %v", path, err)
		}
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
