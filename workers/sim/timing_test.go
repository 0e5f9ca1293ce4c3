package sim

import (
	"context"
	"testing"
	"time"

	"github.com/duet-serve/duet/workers/sim/model"
	"github.com/stretchr/testify/require"
)

func TestTimeModel(t *testing.T) {
	m := newTimeModel(Defaults())
	tests := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"prefill of nothing is the overhead", m.Prefill(0, 1), 10 * time.Millisecond},
		{"prefill of 20k tokens", m.Prefill(20000, 1), 1010 * time.Millisecond},
		{"prefill, slow worker", m.Prefill(2000, 2), 220 * time.Millisecond},
		{"itl alone", m.ITL(0, 1), 7 * time.Millisecond},
		{"itl with 100 running", m.ITL(100, 1), 12 * time.Millisecond},
		{"transfer of nothing", m.Transfer(0, 1), 2 * time.Millisecond},
		{"transfer of 100k tokens", m.Transfer(100000, 1), 502 * time.Millisecond},
		{"slow <= 0 counts as 1", m.ITL(0, 0), 7 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.got)
		})
	}
	m.Scale = 0.01
	require.Equal(t, 70*time.Microsecond, m.ITL(0, 1), "time_scale shrinks every duration")
	m.Scale = 0
	require.Zero(t, m.Prefill(100000, 3), "time_scale 0 removes delays")
}

func TestPrefillQueueIsOneFIFOServer(t *testing.T) {
	t0 := time.Unix(100, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	steps := []struct {
		arrive, dur        time.Duration
		wantStart, wantEnd time.Duration
		explanation        string
	}{
		{0, ms(100), 0, ms(100), "idle: starts at once"},
		{ms(10), ms(50), ms(100), ms(150), "queues behind the first"},
		{ms(20), ms(10), ms(150), ms(160), "and behind the second"},
		{ms(500), ms(10), ms(500), ms(510), "idle again: starts at arrival"},
	}
	var q model.PrefillQueue
	for _, st := range steps {
		start, end := q.Reserve(t0.Add(st.arrive), st.dur)
		require.Equal(t, t0.Add(st.wantStart), start, st.explanation)
		require.Equal(t, t0.Add(st.wantEnd), end, st.explanation)
	}
}

func TestDecodeSchedule(t *testing.T) {
	t0 := time.Unix(100, 0)
	d := decodeSchedule{next: t0}
	require.True(t, d.due(t0))
	d.advance(10 * time.Millisecond)
	require.False(t, d.due(t0.Add(5*time.Millisecond)))
	// After oversleeping to 35 ms, tokens due at 10, 20 and 30 ms are all
	// due back to back; the one at 40 ms is not.
	now := t0.Add(35 * time.Millisecond)
	n := 0
	for d.due(now) {
		n++
		d.advance(10 * time.Millisecond)
	}
	require.Equal(t, 3, n)
	require.Equal(t, t0.Add(40*time.Millisecond), d.next)
}

func TestClockSleepUntil(t *testing.T) {
	c := realClock()
	require.True(t, c.sleepUntil(context.Background(), time.Now().Add(-time.Second)), "past deadline returns at once")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, c.sleepUntil(ctx, time.Now().Add(time.Hour)), "a done context ends the sleep")
	require.False(t, c.sleepUntil(ctx, time.Now().Add(-time.Second)), "a done context wins over a past deadline")
}
