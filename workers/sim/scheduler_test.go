package sim

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testScheduler(maxRunning, maxWaiting, capacity int) *scheduler {
	cfg := Defaults()
	cfg.MaxNumSeqs, cfg.MaxWaiting, cfg.KVCapacityBlocks, cfg.BlockSize = maxRunning, maxWaiting, capacity, 16
	return newScheduler(cfg, nil)
}

func requireIdle(t *testing.T, s *scheduler) {
	t.Helper()
	st := s.stats()
	require.Zero(t, st.Running, "running")
	require.Zero(t, st.Waiting, "waiting")
	require.Zero(t, st.Pins, "pins")
	require.Zero(t, st.KV.Referenced, "referenced blocks")
}

// admitAsync admits in a goroutine and returns a channel with the result.
func admitAsync(ctx context.Context, s *scheduler, spec admitSpec) <-chan *lease {
	ch := make(chan *lease, 1)
	go func() {
		l, err := s.admit(ctx, spec)
		if err != nil {
			l = nil
		}
		ch <- l
	}()
	return ch
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, time.Millisecond, what)
}

func TestSchedulerAdmission(t *testing.T) {
	tests := []struct {
		name                   string
		maxRunning, maxWaiting int
		capacity               int
		first, second          int // blocks
		wantSecond             error
		wantSecondWaits        bool
	}{
		{"both fit", 2, 0, 10, 3, 3, nil, false},
		{"slot busy, waits", 1, 1, 10, 3, 3, nil, true},
		{"slot busy, queue full", 1, 0, 10, 3, 3, errQueueFull, false},
		{"blocks busy, waits", 2, 1, 10, 8, 3, nil, true},
		{"never fits", 2, 1, 10, 3, 11, errTooLarge, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testScheduler(tt.maxRunning, tt.maxWaiting, tt.capacity)
			l1, err := s.admit(context.Background(), admitSpec{totalBlocks: tt.first})
			require.NoError(t, err)
			if !tt.wantSecondWaits {
				l2, err := s.admit(context.Background(), admitSpec{totalBlocks: tt.second})
				require.ErrorIs(t, err, tt.wantSecond)
				if l2 != nil {
					l2.finish(seqBlocks{})
				}
				l1.finish(seqBlocks{})
				requireIdle(t, s)
				return
			}
			ch := admitAsync(context.Background(), s, admitSpec{totalBlocks: tt.second})
			waitFor(t, "second waits", func() bool { return s.stats().Waiting == 1 })
			l1.finish(seqBlocks{})
			l2 := <-ch
			require.NotNil(t, l2)
			require.Equal(t, 1, s.stats().Running)
			l2.finish(seqBlocks{})
			l2.finish(seqBlocks{}) // ending twice is a no-op
			requireIdle(t, s)
		})
	}
}

func TestSchedulerWaiterGivesUp(t *testing.T) {
	s := testScheduler(1, 4, 10)
	l1, err := s.admit(context.Background(), admitSpec{totalBlocks: 2})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() {
		_, err := s.admit(ctx, admitSpec{totalBlocks: 2})
		ch <- err
	}()
	waitFor(t, "waiting", func() bool { return s.stats().Waiting == 1 })
	cancel()
	require.True(t, errors.Is(<-ch, context.Canceled))
	require.Equal(t, 0, s.stats().Waiting)
	l1.finish(seqBlocks{})
	requireIdle(t, s)
}

func TestSchedulerFIFOHeadOfLine(t *testing.T) {
	s := testScheduler(4, 4, 10)
	big, err := s.admit(context.Background(), admitSpec{totalBlocks: 8})
	require.NoError(t, err)
	head := admitAsync(context.Background(), s, admitSpec{totalBlocks: 5})
	waitFor(t, "head waits", func() bool { return s.stats().Waiting == 1 })
	next := admitAsync(context.Background(), s, admitSpec{totalBlocks: 1})
	waitFor(t, "next waits", func() bool { return s.stats().Waiting == 2 })
	// 2 blocks are free, enough for next but not for head: FCFS keeps next
	// behind head.
	require.Equal(t, 1, s.stats().Running)
	big.finish(seqBlocks{})
	l1, l2 := <-head, <-next
	require.NotNil(t, l1)
	require.NotNil(t, l2)
	l1.finish(seqBlocks{})
	l2.finish(seqBlocks{})
	requireIdle(t, s)
}

func TestSchedulerPins(t *testing.T) {
	t0 := time.Unix(1000, 0)
	hashes := []uint64{7, 8, 9}
	info := pinInfo{PromptTokens: 50, BlockSize: 16, LastHash: hashes[2]}
	tests := []struct {
		name    string
		at      time.Time
		check   func(pinInfo) error
		wantErr error
		consume bool
	}{
		{"pulled in time", t0.Add(time.Second), nil, nil, true},
		{"expired", t0.Add(31 * time.Second), nil, errHandleExpired, true},
		{"mismatch keeps the pin", t0.Add(time.Second), func(pinInfo) error { return errHandleMismatch }, errHandleMismatch, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testScheduler(4, 0, 10)
			l, err := s.admit(context.Background(), admitSpec{hashes: hashes, maxMatch: 3, totalBlocks: 4})
			require.NoError(t, err)
			blocks, ok := l.pin("k", t0.Add(30*time.Second), info, seqBlocks{hashes: hashes})
			require.True(t, ok)
			require.Len(t, blocks, 4)
			_, ok = l.pin("k2", t0, info, seqBlocks{hashes: hashes})
			require.False(t, ok, "a lease ends once")
			st := s.stats()
			require.Equal(t, 0, st.Running, "a pinned sequence no longer runs")
			require.Equal(t, 1, st.Pins)
			require.Equal(t, 4, st.KV.Referenced, "pinned blocks stay referenced")

			// Pinned blocks cannot be evicted.
			_, err = s.admit(context.Background(), admitSpec{totalBlocks: 7})
			require.ErrorIs(t, err, errQueueFull)

			got, err := s.takePin("k", tt.at, tt.check)
			require.ErrorIs(t, err, tt.wantErr)
			if tt.wantErr == nil {
				require.Equal(t, 50, got.PromptTokens)
				require.Len(t, got.BlockIDs, 4)
			}
			if !tt.consume {
				require.Equal(t, 1, s.stats().Pins)
				_, err = s.takePin("k", tt.at, nil)
				require.NoError(t, err)
			}
			_, err = s.takePin("k", tt.at, nil)
			require.ErrorIs(t, err, errHandleUnknown, "a handle is valid once")
			requireIdle(t, s)
			require.Equal(t, 3, s.kv.Lookup(hashes), "the prompt blocks stay cached after the pull")
		})
	}
}

func TestSchedulerExpirePins(t *testing.T) {
	s := testScheduler(4, 4, 10)
	t0 := time.Unix(1000, 0)
	for i, ttl := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		l, err := s.admit(context.Background(), admitSpec{totalBlocks: 1})
		require.NoError(t, err)
		_, ok := l.pin(string(rune('a'+i)), t0.Add(ttl), pinInfo{}, seqBlocks{})
		require.True(t, ok)
	}
	require.Equal(t, 0, s.expirePins(t0))
	require.Equal(t, 2, s.expirePins(t0.Add(2500*time.Millisecond)))
	require.Equal(t, 1, s.stats().Pins)
	require.Equal(t, 1, s.dropAllPins())
	requireIdle(t, s)
}

func TestSchedulerWaiterAdmittedWhenPinReleased(t *testing.T) {
	s := testScheduler(4, 4, 4)
	l, err := s.admit(context.Background(), admitSpec{totalBlocks: 4})
	require.NoError(t, err)
	_, ok := l.pin("k", time.Unix(10, 0), pinInfo{}, seqBlocks{})
	require.True(t, ok)
	ch := admitAsync(context.Background(), s, admitSpec{totalBlocks: 2})
	waitFor(t, "waits for blocks", func() bool { return s.stats().Waiting == 1 })
	require.Equal(t, 1, s.expirePins(time.Unix(11, 0)))
	l2 := <-ch
	require.NotNil(t, l2)
	l2.finish(seqBlocks{})
	requireIdle(t, s)
}
