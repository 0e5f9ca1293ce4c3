package sim

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTakePinWait(t *testing.T) {
	tests := []struct {
		name    string
		pinLate time.Duration // pin the key after this; < 0 never
		cancel  bool
		want    error
	}{
		{"pinned before", 0, false, nil},
		{"pinned while waiting", 20 * time.Millisecond, false, nil},
		{"never pinned", -1, false, errHandleUnknown},
		{"caller gives up", -1, true, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler(testConfig("context", ProtocolSGLang), nil)
			l, err := s.admit(context.Background(), admitSpec{totalBlocks: 1})
			require.NoError(t, err)
			watch := newPinWatch()
			pinned := make(chan bool, 1)
			pin := func() {
				_, ok := l.pinWatched("k", time.Now().Add(time.Minute), pinInfo{PromptTokens: 3}, seqBlocks{}, watch)
				pinned <- ok
			}
			if tt.pinLate == 0 {
				pin()
			} else if tt.pinLate > 0 {
				time.AfterFunc(tt.pinLate, pin) // require only on the test goroutine: pinned carries the result
			}
			ctx, cancel := context.WithCancel(context.Background())
			if tt.cancel {
				cancel()
			}
			defer cancel()
			info, err := s.takePinWait(ctx, "k", 500*time.Millisecond, time.Now, nil)
			require.ErrorIs(t, err, tt.want)
			if tt.want != nil {
				require.Zero(t, s.stats().Pins)
				l.finish(seqBlocks{})
				return
			}
			require.True(t, <-pinned)
			require.Equal(t, 3, info.PromptTokens)
			<-watch.done
			require.True(t, watch.taken, "the pinner learns that the pin was taken")
			st := s.stats()
			require.Zero(t, st.Pins+st.Running+st.KV.Referenced)
		})
	}
}

// TestPinWatchExpired: an expired pin closes its watch untaken.
func TestPinWatchExpired(t *testing.T) {
	s := newScheduler(testConfig("context", ProtocolSGLang), nil)
	l, err := s.admit(context.Background(), admitSpec{totalBlocks: 1})
	require.NoError(t, err)
	watch := newPinWatch()
	_, ok := l.pinWatched("k", time.Now(), pinInfo{}, seqBlocks{}, watch)
	require.True(t, ok)
	require.Equal(t, 1, s.expirePins(time.Now().Add(time.Second)))
	<-watch.done
	require.False(t, watch.taken)
}
