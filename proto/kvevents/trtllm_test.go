package kvevents

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// trtllmBody is what KVCacheEventSerializer (tensorrt_llm/_utils.py) emits
// for a created, a stored (two 2-token blocks), an updated and a removed event.
const trtllmBody = `[
 {"event_id": 0, "data": {"type": "created", "num_blocks_per_cache_level": [100, 0]}, "window_size": 4096},
 {"event_id": 1, "data": {"type": "stored", "parent_hash": null, "blocks": [
   {"type": "stored_block", "block_hash": 18446744073709551615, "tokens": [
     {"type": "unique_token", "token_id": 1, "token_extra_id": 0},
     {"type": "unique_token", "token_id": 2, "token_extra_id": 0}], "cache_level": 0, "priority": 35},
   {"type": "stored_block", "block_hash": 7, "tokens": [
     {"type": "unique_token", "token_id": 3, "token_extra_id": 0},
     {"type": "unique_token", "token_id": 4, "token_extra_id": 0}], "cache_level": 0, "priority": 35}]},
  "window_size": 4096},
 {"event_id": 2, "data": {"type": "updated", "block_hash": 7,
   "cache_level": {"type": "event_diff", "new_value": 1, "old_value": 0}, "priority": null}, "window_size": 4096},
 {"event_id": 3, "data": {"type": "removed", "block_hashes": [7]}, "window_size": 4096, "attention_dp_rank": 1}
]`

func TestDecodeTRTLLMEvents(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	got, err := DecodeTRTLLMEvents([]byte(trtllmBody))
	require.NoError(t, err)
	require.Equal(t, []TRTLLMEvent{
		{EventID: 0, WindowSize: 4096, Event: &AllBlocksCleared{}},
		{EventID: 1, WindowSize: 4096, Event: &BlockStored{
			BlockHashes: []BlockHash{HashFromUint64(1<<64 - 1), HashFromUint64(7)},
			TokenIDs:    []int{1, 2, 3, 4}, BlockSize: 2, Medium: "GPU"}},
		{EventID: 2, WindowSize: 4096, Event: &BlockUpdated{BlockHash: HashFromUint64(7), CacheLevel: i64(1), OldCacheLevel: i64(0)}},
		{EventID: 3, WindowSize: 4096, AttentionDPRank: i64(1), Event: &BlockRemoved{BlockHashes: []BlockHash{HashFromUint64(7)}}},
	}, got)

	for _, bad := range []string{`{}`, `[{"data": {"type": "created"}}]`, `[{"event_id": 1, "data": {"type": "moved"}}]`,
		`[{"event_id": 1, "data": {"type": "removed", "block_hashes": [-1]}}]`} {
		_, err := DecodeTRTLLMEvents([]byte(bad))
		require.ErrorIs(t, err, ErrMalformed, bad)
	}
}

// fakeTRTLLM serves POST /kv_cache_events from a list of bodies, one per
// request, then "[]", and rejects other methods as FastAPI does.
type fakeTRTLLM struct {
	mu     sync.Mutex
	bodies []string
}

func (f *fakeTRTLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/kv_cache_events" || r.Method != http.MethodPost {
		http.Error(w, `{"detail":"Method Not Allowed"}`, http.StatusMethodNotAllowed)
		return
	}
	f.mu.Lock()
	body := "[]"
	if len(f.bodies) > 0 {
		body, f.bodies = f.bodies[0], f.bodies[1:]
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(body))
}

func TestPollerDeliversAndResetsOnGap(t *testing.T) {
	fake := &fakeTRTLLM{bodies: []string{
		trtllmBody,
		`[{"event_id": 3, "data": {"type": "removed", "block_hashes": [1]}}]`,                  // rank-less ids run on from 2
		`[{"event_id": 9, "data": {"type": "removed", "block_hashes": [2]}}]`,                  // 4..8 lost
		`[{"event_id": 0, "data": {"type": "created", "num_blocks_per_cache_level": [1, 0]}}]`, // restart
		`not json`,
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	sink := &recSink{}
	p, err := NewPoller(PollerConfig{URL: srv.URL + "/kv_cache_events", Topic: "trt-0"}, sink, nil)
	require.NoError(t, err)
	for i := 0; i < 4; i++ {
		require.NoError(t, p.PollOnce(context.Background()))
	}
	require.ErrorIs(t, p.PollOnce(context.Background()), ErrMalformed)

	require.Equal(t, []string{"apply", "apply", "apply", "reset gap", "apply", "reset restart", "apply", "reset malformed"},
		sink.lastCalls(100))
	bs, _ := sink.snapshot()
	require.Len(t, bs[0].Events, 3) // rank-less events of the first poll
	require.Equal(t, uint64(2), bs[0].Seq)
	require.Equal(t, "trt-0", bs[0].Topic)
}
