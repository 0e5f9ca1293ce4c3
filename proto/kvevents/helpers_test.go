package kvevents

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// assertBatch compares batches field by field (Events deeply).
func assertBatch(t *testing.T, want, got Batch) {
	t.Helper()
	require.Equal(t, want.Topic, got.Topic, "topic")
	require.Equal(t, want.Seq, got.Seq, "seq")
	require.Equal(t, want.TS, got.TS, "ts")
	require.Equal(t, want.DataParallelRank, got.DataParallelRank, "data_parallel_rank")
	require.Len(t, got.Events, len(want.Events), "events")
	for i := range want.Events {
		require.Equal(t, want.Events[i], got.Events[i], "events[%d]", i)
	}
}

func isMalformed(err error) bool { return errors.Is(err, ErrMalformed) }
