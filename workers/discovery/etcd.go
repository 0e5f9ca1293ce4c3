package discovery

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
)

// Etcd lists the workers that registered themselves in etcd the way
// TensorRT-LLM's workers do (trtllm-serve --server_role ROLE
// --disagg_cluster_uri etcd://...): one key per worker under
// /trtllm-disagg/{cluster_name}/workers/, whose value is the JSON
// {"worker_id", "host", "port", "role"} with role 0 for context and 1 for
// generation, kept alive by a lease the worker renews (TensorRT-LLM
// tensorrt_llm/serve/disagg_auto_scaling.py, get_worker_key and WorkerInfo).
// It reads etcd's v3 JSON gateway (POST /v3/kv/range), so it needs no gRPC
// client.
type Etcd struct {
	// Endpoints are etcd's client URLs (http://host:port), tried in order.
	Endpoints []string
	// Cluster is TensorRT-LLM's cluster_name ("" by default).
	Cluster string
	// Client makes the calls; nil uses a client with a 5 s timeout.
	Client *http.Client
}

// ParseEtcdURI reads TensorRT-LLM's cluster_uri form of etcd endpoints:
// "etcd://host:port", several separated by commas.
func ParseEtcdURI(uri string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(uri, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Scheme != "etcd" || u.Host == "" {
			return nil, fmt.Errorf("must be etcd://host:port (several separated by commas), got %q", uri)
		}
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return nil, fmt.Errorf("must be etcd://host:port (several separated by commas), got %q", uri)
		}
		out = append(out, "http://"+u.Host)
	}
	return out, nil
}

// Prefix is the key prefix of the cluster's workers.
func (e Etcd) Prefix() string { return "/trtllm-disagg/" + e.Cluster + "/workers/" }

// trtllmWorker is a registered worker's value.
type trtllmWorker struct {
	WorkerID string `json:"worker_id"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Role     int    `json:"role"`
}

// TensorRT-LLM's ServerRole values (an IntEnum in its serve package).
const (
	trtllmContext    = 0
	trtllmGeneration = 1
)

// List returns the registered workers, sorted by ID. Values that are not a
// context or generation worker's registration are skipped.
func (e Etcd) List(ctx context.Context) ([]Worker, error) {
	prefix := e.Prefix()
	body, _ := json.Marshal(map[string]string{"key": b64(prefix), "range_end": b64(prefixEnd(prefix))})
	var lastErr error
	for _, ep := range e.Endpoints {
		kvs, err := e.rangeAt(ctx, ep, body)
		if err != nil {
			lastErr = err
			continue
		}
		return workersOf(kvs), nil
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("no etcd endpoint")
	}
	return nil, lastErr
}

type kv struct{ Key, Value string }

func (e Etcd) rangeAt(ctx context.Context, endpoint string, body []byte) ([]kv, error) {
	client := e.Client
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/v3/kv/range", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("etcd %s: status %d: %s", endpoint, resp.StatusCode, bytes.TrimSpace(raw))
	}
	var out struct {
		Kvs []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"kvs"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("etcd %s: %w", endpoint, err)
	}
	kvs := make([]kv, 0, len(out.Kvs))
	for _, x := range out.Kvs {
		k, _ := base64.StdEncoding.DecodeString(x.Key)
		v, _ := base64.StdEncoding.DecodeString(x.Value)
		kvs = append(kvs, kv{string(k), string(v)})
	}
	return kvs, nil
}

// workersOf reads registrations; a malformed one is skipped.
func workersOf(kvs []kv) []Worker {
	var out []Worker
	for _, x := range kvs {
		var w trtllmWorker
		if json.Unmarshal([]byte(x.Value), &w) != nil || w.Host == "" || w.Port < 1 || w.Port > 65535 {
			continue
		}
		role := disagg.RoleContext
		switch w.Role {
		case trtllmContext:
		case trtllmGeneration:
			role = disagg.RoleGeneration
		default:
			continue // multimodal encoders and other roles do not serve chat phases
		}
		id := w.WorkerID
		if id == "" {
			id = x.Key[strings.LastIndexByte(x.Key, '/')+1:]
		}
		cand := Worker{ID: id, URL: "http://" + net.JoinHostPort(w.Host, strconv.Itoa(w.Port)), Role: role}
		if cand.Validate() == nil {
			out = append(out, cand)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// prefixEnd is the smallest key after every key with prefix (etcd's
// range_end for a prefix).
func prefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

// WatchEtcd lists the workers now and every interval until ctx ends,
// calling apply when the list changes, and with the error when a listing
// fails after one that did not (the caller keeps the previous set).
func WatchEtcd(ctx context.Context, e Etcd, interval time.Duration, apply func([]Worker, error)) {
	poll(ctx, interval, func() (string, func()) {
		ws, err := e.List(ctx)
		return signature(ws, err), func() { apply(ws, err) }
	})
}

// signature names a listing's outcome, to call apply on changes only.
func signature(ws []Worker, err error) string {
	if err != nil {
		return "error"
	}
	var b strings.Builder
	for _, w := range ws {
		fmt.Fprintf(&b, "%s %s %s;", w.ID, w.URL, w.Role)
	}
	return b.String()
}
