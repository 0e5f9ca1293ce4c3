package workers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecideRestart(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	policy := RestartPolicy{Attempts: 3, Interval: time.Minute, Delay: time.Second, MaxDelay: 5 * time.Second, Jitter: 0.5}
	cases := []struct {
		name    string
		policy  RestartPolicy
		history []time.Time
		rnd     float64
		want    RestartDecision
	}{
		{"first failure waits delay", policy, nil, 0, RestartDecision{Restart: true, Wait: time.Second}},
		{"second doubles", policy, []time.Time{ago(10 * time.Second)}, 0, RestartDecision{Restart: true, Wait: 2 * time.Second}},
		{"third doubles again", policy, []time.Time{ago(20 * time.Second), ago(10 * time.Second)}, 0, RestartDecision{Restart: true, Wait: 4 * time.Second}},
		{"capped at max delay", RestartPolicy{Attempts: 10, Interval: time.Minute, Delay: time.Second, MaxDelay: 3 * time.Second},
			[]time.Time{ago(3 * time.Second), ago(2 * time.Second), ago(time.Second)}, 0, RestartDecision{Restart: true, Wait: 3 * time.Second}},
		{"jitter shortens", policy, nil, 0.5, RestartDecision{Restart: true, Wait: 750 * time.Millisecond}},
		{"full jitter never below 1-jitter", policy, []time.Time{ago(time.Second)}, 0.999999, RestartDecision{Restart: true, Wait: 1000001 * time.Microsecond}},
		{"limit reached", policy, []time.Time{ago(30 * time.Second), ago(20 * time.Second), ago(10 * time.Second)}, 0,
			RestartDecision{Reason: "restart limit reached: 3 restarts within 1m0s"}},
		{"old restarts forgotten", policy, []time.Time{ago(3 * time.Minute), ago(2 * time.Minute), ago(61 * time.Second)}, 0,
			RestartDecision{Restart: true, Wait: time.Second}},
		{"window boundary excluded", policy, []time.Time{ago(time.Minute), ago(time.Second), ago(time.Second)}, 0,
			RestartDecision{Restart: true, Wait: 4 * time.Second}},
		{"history order does not matter", policy, []time.Time{ago(time.Second), ago(2 * time.Hour), ago(5 * time.Second)}, 0,
			RestartDecision{Restart: true, Wait: 4 * time.Second}},
		{"restarts disabled", RestartPolicy{}, nil, 0, RestartDecision{Reason: "restarts disabled (restart.attempts is 0)"}},
		{"zero delay", RestartPolicy{Attempts: 1, Interval: time.Minute}, nil, 0.7, RestartDecision{Restart: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, DecideRestart(tc.policy, tc.history, now, tc.rnd))
		})
	}
}

func TestPruneHistory(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	h := []time.Time{now.Add(-2 * time.Minute), now.Add(-30 * time.Second), now.Add(-time.Minute), now}
	require.Equal(t, []time.Time{now.Add(-30 * time.Second), now}, pruneHistory(h, now, time.Minute))
}
