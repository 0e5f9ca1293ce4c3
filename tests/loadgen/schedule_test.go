package loadgen

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConcurrencyCountsSessionsThroughThinkTime(t *testing.T) {
	f := newFakeServer(t, 3)
	cfg := testConfig(f.srv.URL)
	cfg.NumSessions, cfg.TurnsMean, cfg.TurnDelayMean, cfg.Concurrency = 6, 3, 30, 2
	cfg.SharedSystemPromptLength = 40
	cfg.ExtraInputs = []ExtraInput{{Key: "ignore_eos", Value: []byte("true")}}
	cfg.Headers = []Header{{Name: "X-User", Value: "bench"}}
	res := runFake(t, cfg)

	reqs := f.requests()
	require.Len(t, reqs, 18)
	require.Equal(t, 2, f.maxActive, "a session holds its slot through think time: never more than 2 open")
	ids := map[string]bool{}
	for _, r := range reqs {
		require.False(t, ids[r.requestID], "X-Request-ID is fresh per request")
		ids[r.requestID] = true
		require.Equal(t, r.corrID, r.affinity, "X-Session-Affinity repeats the session id")
		require.Equal(t, "bench", r.userHdr)
		require.True(t, r.stream && r.includeUsed, "streaming asks for usage")
		require.Equal(t, 4, r.maxTokens, "--osl is sent as max_completion_tokens")
		require.Equal(t, true, r.ignoreEOS, "extra inputs keep their JSON type")
	}
	sessions := f.bySession()
	require.Len(t, sessions, 6)
	system := ""
	for id, turns := range sessions {
		require.Len(t, turns, 3, id)
		for k, r := range turns {
			require.Len(t, r.messages, 2+2*k, "system + earlier turns with their replies + the new turn")
			if system == "" {
				system = r.messages[0].Content
			}
			require.Equal(t, "system", r.messages[0].Role)
			require.Equal(t, system, r.messages[0].Content, "the system prompt is shared")
			if k > 0 {
				prev := turns[k-1]
				require.Equal(t, prev.messages, r.messages[:len(prev.messages)], "turn k resends turn k-1's prompt")
				require.Equal(t, fakeMessage{"assistant", prev.reply}, r.messages[len(prev.messages)], "with the model's actual reply")
				require.GreaterOrEqual(t, r.at.Sub(prev.end), 30*time.Millisecond, "think time after the previous answer")
			}
		}
	}
	sum := SummarizeRecords(res.Records)
	require.Equal(t, 18.0, *sum.Metric("request_count").Value)
	require.Equal(t, 0.0, *sum.Metric("error_request_count").Value)
	require.Len(t, sum.Turns, 3)
	for _, tu := range sum.Turns {
		require.Equal(t, 6, tu.Requests)
	}
	require.Len(t, res.Sessions, 6)
}

func TestRequestCountStopsMidSession(t *testing.T) {
	f := newFakeServer(t, 3)
	cfg := testConfig(f.srv.URL)
	cfg.TurnsMean, cfg.RequestCount = 3, 5
	res := runFake(t, cfg)
	require.Len(t, f.requests(), 5)
	require.Len(t, res.Records, 5)
	require.Equal(t, 1, f.maxActive, "default concurrency is one session")
}

func TestRequestRateConstant(t *testing.T) {
	f := newFakeServer(t, 1)
	cfg := testConfig(f.srv.URL)
	cfg.RequestRate, cfg.ArrivalPattern, cfg.RequestCount = 100, ArrivalConstant, 21
	runFake(t, cfg)
	reqs := f.requests()
	require.Len(t, reqs, 21)
	span := reqs[len(reqs)-1].at.Sub(reqs[0].at)
	require.GreaterOrEqual(t, span, 170*time.Millisecond, "20 gaps of 10 ms")
	require.Less(t, span, 2*time.Second)
}

func TestRequestRateServesContinuationsFirst(t *testing.T) {
	f := newFakeServer(t, 2)
	cfg := testConfig(f.srv.URL)
	cfg.RequestRate, cfg.ArrivalPattern, cfg.NumSessions, cfg.TurnsMean = 200, ArrivalPoisson, 10, 2
	runFake(t, cfg)
	sessions := f.bySession()
	require.Len(t, sessions, 10)
	for _, turns := range sessions {
		require.Len(t, turns, 2)
		require.True(t, turns[1].at.After(turns[0].end))
	}
}

func TestDurationStopsSending(t *testing.T) {
	f := newFakeServer(t, 1000)
	f.chunkDelay = 2 * time.Millisecond
	cfg := testConfig(f.srv.URL)
	cfg.Duration, cfg.Concurrency, cfg.TurnsMean = 300*time.Millisecond, 2, 1000
	start := time.Now()
	res := runFake(t, cfg)
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 300*time.Millisecond)
	require.Less(t, took, 3*time.Second)
	require.NotEmpty(t, res.Records)
	for _, r := range res.Records {
		require.True(t, r.OK(), "in-flight requests finish within the grace period: %+v", r.Err)
		require.True(t, r.Start.Before(start.Add(350*time.Millisecond)), "nothing is sent after the duration")
	}
}

func TestDurationGraceCancelsInFlight(t *testing.T) {
	f := newFakeServer(t, 1)
	f.chunks, f.chunkDelay = 50, 20*time.Millisecond // a 1 s answer
	cfg := testConfig(f.srv.URL)
	cfg.Duration, cfg.GracePeriod = 100*time.Millisecond, 100*time.Millisecond
	res := runFake(t, cfg)
	require.Len(t, res.Records, 1)
	r := res.Records[0]
	require.True(t, r.Cancelled)
	require.Equal(t, ErrCancelled, r.Err.Type)
}

func TestUserCentricGapsAndIDs(t *testing.T) {
	f := newFakeServer(t, 3)
	cfg := testConfig(f.srv.URL)
	cfg.UserCentricRate, cfg.NumUsers, cfg.TurnsMean, cfg.Duration = 30, 3, 3, 550*time.Millisecond
	runFake(t, cfg)
	sessions := f.bySession()
	for _, id := range []string{"1", "2", "3", "4"} {
		require.Contains(t, sessions, id, "users are numbered from 1 and replaced with new numbers")
	}
	require.Len(t, sessions["1"], 1, "the first wave is shortened: user 1 of 3 sends 1 of 3 turns")
	require.Len(t, sessions["3"], 3)
	turns := sessions["3"]
	for k := 1; k < len(turns); k++ {
		gap := turns[k].at.Sub(turns[k-1].at)
		require.InDelta(t, 100, float64(gap.Milliseconds()), 40, "a user sends a turn every users/rate = 100 ms")
	}
	first := map[string]time.Time{}
	for id, turns := range sessions {
		first[id] = turns[0].at
	}
	stagger := first["2"].Sub(first["1"])
	require.InDelta(t, 33, float64(stagger.Milliseconds()), 25, "users start staggered by gap/users")
}

func TestFixedScheduleReplaysTimestamps(t *testing.T) {
	f := newFakeServer(t, 2)
	dir := t.TempDir()
	path := filepath.Join(dir, "trace.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(
		`{"session_id":"b","turns":[{"text":"second","timestamp":1150},{"text":"again","timestamp":1300}]}
{"session_id":"a","turns":[{"text":"first","timestamp":1000},{"text":"later","delay":50}]}
`), 0o644))
	cfg := testConfig(f.srv.URL)
	cfg.InputFile, cfg.DatasetType, cfg.FixedSchedule, cfg.FixedScheduleAutoOffset = path, DatasetMultiTurn, true, true
	start := time.Now()
	res := runFake(t, cfg)
	reqs := f.requests()
	require.Len(t, reqs, 4)
	at := func(text string) time.Duration {
		for _, r := range reqs {
			if r.messages[len(r.messages)-1].Content == text {
				return r.at.Sub(start)
			}
		}
		t.Fatalf("no request for %q", text)
		return 0
	}
	require.Less(t, at("first"), 60*time.Millisecond, "auto offset: the first timestamp is the start")
	require.InDelta(t, 150, float64(at("second").Milliseconds()), 60)
	require.InDelta(t, 300, float64(at("again").Milliseconds()), 60)
	require.GreaterOrEqual(t, at("later"), 50*time.Millisecond, "a turn without timestamp waits its delay")
	require.Equal(t, []string{"a", "b"}, []string{res.Sessions[0].ID, res.Sessions[1].ID}, "sessions start in timestamp order")
}

func TestWarmupIsNotMeasured(t *testing.T) {
	f := newFakeServer(t, 1)
	cfg := testConfig(f.srv.URL)
	cfg.WarmupRequestCount, cfg.RequestCount = 3, 4
	res := runFake(t, cfg)
	require.Len(t, f.requests(), 7)
	phases := map[string]int{}
	for _, r := range res.Records {
		phases[r.Phase]++
	}
	require.Equal(t, map[string]int{PhaseWarmup: 3, PhaseProfiling: 4}, phases)
	require.Equal(t, PhaseWarmup, res.Records[0].Phase, "warm-up records come first")
	require.Equal(t, 4.0, *SummarizeRecords(res.Records).Metric("request_count").Value)
}

func TestSessionHeaderRenamedOrOff(t *testing.T) {
	f := newFakeServer(t, 1)
	cfg := testConfig(f.srv.URL)
	cfg.RequestCount, cfg.SessionHeader = 2, "none"
	runFake(t, cfg)
	for _, r := range f.requests() {
		require.Empty(t, r.corrID)
		require.Empty(t, r.affinity)
	}
	cfg.SessionHeader, cfg.NoAffinityHeader = "X-Session-ID", true
	c := NewClient(cfg, nil, 1)
	h := map[string][]string{}
	c.setHeaders(h, "req", "sess")
	require.Equal(t, []string{"sess"}, h["X-Session-Id"])
	require.NotContains(t, h, "X-Session-Affinity")
	require.Equal(t, []string{"req"}, h["X-Request-Id"])
}
