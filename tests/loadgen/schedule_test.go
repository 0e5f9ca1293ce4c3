package loadgen

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every run here is on a fake clock (runFake): the times asserted are exact
// instants of the schedule, not wall-clock windows. The fake engine answers
// in 4 ms unless a test says otherwise.

const msec = time.Millisecond

func TestConcurrencyCountsSessionsThroughThinkTime(t *testing.T) {
	f := newFakeEngine(3)
	cfg := testConfig()
	cfg.NumSessions, cfg.TurnsMean, cfg.TurnDelayMean, cfg.Concurrency = 6, 3, 30, 2
	cfg.SharedSystemPromptLength = 40
	cfg.ExtraInputs = []ExtraInput{{Key: "ignore_eos", Value: []byte("true")}}
	cfg.Headers = []Header{{Name: "X-User", Value: "bench"}}
	res := runFake(t, f, cfg)

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
	var starts []time.Duration
	for id, turns := range sessions {
		require.Len(t, turns, 3, id)
		starts = append(starts, turns[0].at.Sub(f.clock.start))
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
				require.Equal(t, 30*msec, r.at.Sub(prev.end), "think time after the previous answer")
			}
		}
	}
	// A session lasts 3 answers of 4 ms and 2 think times of 30 ms = 72 ms,
	// and the next one starts in the slot it frees.
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	require.Equal(t, []time.Duration{0, 0, 72 * msec, 72 * msec, 144 * msec, 144 * msec}, starts)
	require.Equal(t, 216*msec, f.clock.Elapsed(), "the run ends with the last answer")
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
	f := newFakeEngine(3)
	cfg := testConfig()
	cfg.TurnsMean, cfg.RequestCount = 3, 5
	res := runFake(t, f, cfg)
	require.Equal(t, []time.Duration{0, 4 * msec, 8 * msec, 12 * msec, 16 * msec}, f.sendTimes(), "back to back, one session at a time")
	require.Len(t, res.Records, 5)
	require.Equal(t, 1, f.maxActive, "default concurrency is one session")
}

func TestRequestRateConstant(t *testing.T) {
	f := newFakeEngine(1)
	cfg := testConfig()
	cfg.RequestRate, cfg.ArrivalPattern, cfg.RequestCount = 100, ArrivalConstant, 21
	res := runFake(t, f, cfg)
	want := make([]time.Duration, 21)
	for i := range want {
		want[i] = time.Duration(i) * 10 * msec
	}
	require.Equal(t, want, f.sendTimes(), "one request every 10 ms from the start")
	var starts []time.Duration
	for _, r := range res.Records {
		starts = append(starts, r.Start.Sub(f.clock.start))
	}
	require.Equal(t, want, starts, "records are timed on the run's clock")
}

func TestRequestRatePoissonFollowsItsSeededArrivals(t *testing.T) {
	cfg := testConfig()
	cfg.RequestRate, cfg.ArrivalPattern, cfg.RequestCount, cfg.Seed = 200, ArrivalPoisson, 40, 11
	arr := newArrivals(cfg.RequestRate, cfg.ArrivalPattern, cfg.Seed)
	want := make([]time.Duration, cfg.RequestCount)
	for i := 1; i < len(want); i++ {
		want[i] = want[i-1] + arr.gap() // accumulated on the schedule, not from when the last one went
	}
	f := newFakeEngine(1)
	runFake(t, f, cfg)
	got := f.sendTimes()
	require.Equal(t, want, got)
	var overlaps int
	for i := 1; i < len(got); i++ {
		if got[i]-got[i-1] < 4*msec {
			overlaps++
		}
	}
	require.Positive(t, overlaps, "arrivals do not wait for answers: some come while one is in flight")
}

func TestRequestRateServesContinuationsFirst(t *testing.T) {
	// A credit every 10 ms and 4 ms answers with no think time: when a
	// credit comes, session n's second turn has been waiting since its first
	// answer and a new session since the previous credit. The continuation
	// goes first, so each session's turns take two consecutive credits.
	f := newFakeEngine(2)
	cfg := testConfig()
	cfg.RequestRate, cfg.ArrivalPattern, cfg.NumSessions, cfg.TurnsMean = 100, ArrivalConstant, 10, 2
	runFake(t, f, cfg)
	var got [][]time.Duration
	for _, at := range f.offsets() {
		got = append(got, at)
	}
	sort.Slice(got, func(i, j int) bool { return got[i][0] < got[j][0] })
	var want [][]time.Duration
	for n := range 10 {
		first := time.Duration(n) * 20 * msec
		want = append(want, []time.Duration{first, first + 10*msec})
	}
	require.Equal(t, want, got)
}

func TestDurationStopsSending(t *testing.T) {
	f := newFakeEngine(1000)
	f.chunkDelay = 2 * msec // 8 ms answers
	cfg := testConfig()
	cfg.Duration, cfg.Concurrency, cfg.TurnsMean = 300*msec, 2, 1000
	res := runFake(t, f, cfg)
	// Two sessions send back to back at 0, 8, ..., 296 ms; the turn due at
	// 304 ms, after the duration, is not sent.
	var want []time.Duration
	for at := time.Duration(0); at < 300*msec; at += 8 * msec {
		want = append(want, at)
	}
	offsets := f.offsets()
	require.Len(t, offsets, 2)
	for id, got := range offsets {
		require.Equal(t, want, got, id)
	}
	require.Len(t, res.Records, 2*len(want))
	for _, r := range res.Records {
		require.True(t, r.OK(), "in-flight requests finish within the grace period: %+v", r.Err)
	}
	require.Equal(t, 304*msec, f.clock.Elapsed(), "the run ends with the last answer, well before the grace period")
}

func TestDurationGraceCancelsInFlight(t *testing.T) {
	f := newFakeEngine(1)
	f.chunks, f.chunkDelay = 50, 30*msec // a 1.5 s answer
	cfg := testConfig()
	cfg.Duration, cfg.GracePeriod = 100*msec, 100*msec
	res := runFake(t, f, cfg)
	require.Len(t, res.Records, 1)
	r := res.Records[0]
	require.True(t, r.Cancelled)
	require.Equal(t, ErrCancelled, r.Err.Type)
	require.Equal(t, f.clock.start, r.Start)
	require.Equal(t, 200*msec, r.End.Sub(r.Start), "cancelled at duration + grace period")
	require.Equal(t, 180*msec, r.LastContent, "the answer's chunks until then were read")
	require.Equal(t, 200*msec, f.clock.Elapsed())
}

func TestUserCentricGapsAndIDs(t *testing.T) {
	f := newFakeEngine(3)
	cfg := testConfig()
	cfg.UserCentricRate, cfg.NumUsers, cfg.TurnsMean, cfg.Duration = 30, 3, 3, 550*msec
	runFake(t, f, cfg)
	// Each of the 3 users sends a turn every users/rate = 100 ms; users start
	// staggered by a third of that. The first wave's sessions are cut to 1,
	// 2 and 3 turns; a user whose session ends is replaced by a new user
	// (numbered in start order) one gap after its last turn.
	g := 100 * msec
	s1, s2 := g/3, 2*g/3
	require.Equal(t, map[string][]time.Duration{
		"1": {0},
		"2": {s1, s1 + g},
		"3": {s2, s2 + g, s2 + 2*g},
		"4": {g, 2 * g, 3 * g},
		"5": {s1 + 2*g, s1 + 3*g, s1 + 4*g},
		"6": {s2 + 3*g, s2 + 4*g},
		"7": {4 * g, 5 * g},
		"8": {s1 + 5*g},
	}, f.offsets())
}

func TestUserCentricRebasesAfterSlowAnswers(t *testing.T) {
	f := newFakeEngine(3)
	f.chunks, f.chunkDelay = 3, msec
	f.chunkDelays = []time.Duration{50 * msec} // the first answer takes 150 ms, the others 3 ms
	cfg := testConfig()
	cfg.UserCentricRate, cfg.NumUsers, cfg.TurnsMean, cfg.Duration = 10, 1, 3, 420*msec
	runFake(t, f, cfg)
	// One user, a turn every 100 ms. The second turn, due at 100 ms, goes
	// when the first answer ends at 150 ms, and the schedule continues from
	// there: 250 ms, then the next session at 350 ms.
	require.Equal(t, map[string][]time.Duration{
		"1": {0, 150 * msec, 250 * msec},
		"2": {350 * msec},
	}, f.offsets())
}

func TestUserCentricNextSessionWaitsForTheLastAnswer(t *testing.T) {
	f := newFakeEngine(2)
	f.chunks, f.chunkDelay = 3, msec
	f.chunkDelays = []time.Duration{msec, 50 * msec} // the second answer takes 150 ms
	cfg := testConfig()
	cfg.UserCentricRate, cfg.NumUsers, cfg.TurnsMean, cfg.Duration = 10, 1, 2, 420*msec
	runFake(t, f, cfg)
	// The user's next session is due at 200 ms but starts when the last
	// answer ends at 250 ms, and keeps the beat from there.
	require.Equal(t, map[string][]time.Duration{
		"1": {0, 100 * msec},
		"2": {250 * msec, 350 * msec},
	}, f.offsets())
}

func TestFixedScheduleReplaysTimestamps(t *testing.T) {
	f := newFakeEngine(2)
	dir := t.TempDir()
	path := filepath.Join(dir, "trace.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(
		`{"session_id":"b","turns":[{"text":"second","timestamp":1150},{"text":"again","timestamp":1300}]}
{"session_id":"a","turns":[{"text":"first","timestamp":1000},{"text":"later","delay":50}]}
`), 0o644))
	cfg := testConfig()
	cfg.InputFile, cfg.DatasetType, cfg.FixedSchedule, cfg.FixedScheduleAutoOffset = path, DatasetMultiTurn, true, true
	res := runFake(t, f, cfg)
	reqs := f.requests()
	require.Len(t, reqs, 4)
	at := map[string]time.Duration{}
	for _, r := range reqs {
		at[r.messages[len(r.messages)-1].Content] = r.at.Sub(f.clock.start)
	}
	require.Equal(t, map[string]time.Duration{
		"first":  0,          // auto offset: the first timestamp is the start
		"later":  54 * msec,  // no timestamp: its delay after the answer to "first"
		"second": 150 * msec, // 1150 - 1000
		"again":  300 * msec, // 1300 - 1000
	}, at)
	require.Equal(t, []string{"a", "b"}, []string{res.Sessions[0].ID, res.Sessions[1].ID}, "sessions start in timestamp order")
}

func TestFixedScheduleTimestampPassedGoesAtOnce(t *testing.T) {
	f := newFakeEngine(2)
	f.chunkDelay = 50 * msec // 200 ms answers
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(
		`{"session_id":"a","turns":[{"text":"first","timestamp":500},{"text":"second","timestamp":600}]}
`), 0o644))
	cfg := testConfig()
	cfg.InputFile, cfg.DatasetType, cfg.FixedSchedule = path, DatasetMultiTurn, true
	runFake(t, f, cfg)
	// No auto offset: the trace's clock starts with the run. The second
	// turn's timestamp passes while the first answer is still streaming.
	require.Equal(t, []time.Duration{500 * msec, 700 * msec}, f.sendTimes())
}

func TestWarmupIsNotMeasured(t *testing.T) {
	f := newFakeEngine(1)
	cfg := testConfig()
	cfg.WarmupRequestCount, cfg.RequestCount = 3, 4
	res := runFake(t, f, cfg)
	require.Len(t, f.requests(), 7)
	starts := map[string][]time.Duration{}
	for _, r := range res.Records {
		starts[r.Phase] = append(starts[r.Phase], r.Start.Sub(f.clock.start))
	}
	require.Equal(t, map[string][]time.Duration{
		PhaseWarmup:    {0, 4 * msec, 8 * msec},
		PhaseProfiling: {12 * msec, 16 * msec, 20 * msec, 24 * msec}, // after the last warm-up answer
	}, starts)
	require.Equal(t, PhaseWarmup, res.Records[0].Phase, "warm-up records come first")
	require.Equal(t, 4.0, *SummarizeRecords(res.Records).Metric("request_count").Value)
}

func TestSessionHeaderRenamedOrOff(t *testing.T) {
	f := newFakeEngine(1)
	cfg := testConfig()
	cfg.RequestCount, cfg.SessionHeader = 2, "none"
	runFake(t, f, cfg)
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
