package discovery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/workers/discovery/etcdtest"
	"github.com/stretchr/testify/require"
)

// register writes a worker's key and value as TensorRT-LLM's
// DisaggClusterWorker does.
func register(srv *etcdtest.Server, cluster, role string, roleNum int, host string, port int, ttl time.Duration) (string, int64) {
	id := fmt.Sprintf("%s-%s:%d-1735689600123-4242-007", role, host, port)
	value := fmt.Sprintf(`{"worker_id": %q, "host": %q, "port": %d, "role": %d}`, id, host, port, roleNum)
	return id, srv.Put("/trtllm-disagg/"+cluster+"/workers/"+id, value, ttl)
}

func TestEtcdListsTensorRTLLMWorkers(t *testing.T) {
	srv := etcdtest.Start(t)
	ctxID, _ := register(srv, "c1", "CONTEXT", 0, "10.0.0.1", 8001, 0)
	genID, lease := register(srv, "c1", "GENERATION", 1, "10.0.0.2", 8002, 30*time.Second)
	register(srv, "c1", "MM_ENCODER", 2, "10.0.0.3", 8003, 0)
	register(srv, "other", "CONTEXT", 0, "10.0.0.9", 8009, 0)
	srv.Put("/trtllm-disagg/c1/workers/garbage", "not json", 0)

	e := Etcd{Endpoints: []string{"http://127.0.0.1:1", srv.URL}, Cluster: "c1"} // the first endpoint is down
	ws, err := e.List(context.Background())
	require.NoError(t, err)
	require.Equal(t, []Worker{
		{ID: ctxID, URL: "http://10.0.0.1:8001", Role: disagg.RoleContext},
		{ID: genID, URL: "http://10.0.0.2:8002", Role: disagg.RoleGeneration},
	}, ws, "only this cluster's context and generation workers")

	srv.Revoke(lease) // the worker stopped renewing its registration
	srv.Delete("/trtllm-disagg/c1/workers/" + ctxID)
	ws, err = e.List(context.Background())
	require.NoError(t, err)
	require.Empty(t, ws)
}

func TestEtcdDefaultClusterNameHasTheDoubleSlash(t *testing.T) {
	srv := etcdtest.Start(t)
	id, _ := register(srv, "", "CONTEXT", 0, "h", 1, 0)
	require.Equal(t, "/trtllm-disagg//workers/", Etcd{}.Prefix())
	ws, err := Etcd{Endpoints: []string{srv.URL}}.List(context.Background())
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, id, ws[0].ID)
}

func TestParseEtcdURI(t *testing.T) {
	eps, err := ParseEtcdURI("etcd://10.0.0.1:2379,etcd://10.0.0.2:2379")
	require.NoError(t, err)
	require.Equal(t, []string{"http://10.0.0.1:2379", "http://10.0.0.2:2379"}, eps)
	for _, bad := range []string{"http://h:2379", "etcd://h", "etcd://h:1,h:2", ""} {
		_, err := ParseEtcdURI(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, "/a0", prefixEnd("/a/"))
}

func TestWatchEtcdReportsChangesOnly(t *testing.T) {
	srv := etcdtest.Start(t)
	e := Etcd{Endpoints: []string{srv.URL}, Cluster: "w"}
	got := make(chan []Worker, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchEtcd(ctx, e, 10*time.Millisecond, func(ws []Worker, err error) {
			if err == nil {
				got <- ws
			}
		})
	}()
	defer func() { cancel(); <-done }()
	next := func() []Worker {
		select {
		case ws := <-got:
			return ws
		case <-time.After(10 * time.Second):
			t.Fatal("no update")
		}
		return nil
	}
	require.Empty(t, next())
	register(srv, "w", "GENERATION", 1, "h", 2, 0)
	require.Len(t, next(), 1)
	select {
	case ws := <-got:
		t.Fatalf("an unchanged listing was applied again: %v", ws)
	case <-time.After(60 * time.Millisecond):
	}
}
