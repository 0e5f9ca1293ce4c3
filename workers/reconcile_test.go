package workers

import (
	"testing"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/stretchr/testify/require"
)

func names(f *Fleet) []string {
	var out []string
	for _, w := range f.Snapshot() {
		if !w.Removed {
			out = append(out, w.Name)
		}
	}
	return out
}

func TestReconcileAddsRemovesAndReplaces(t *testing.T) {
	f := externalFleet(t, time.Hour)
	a := ExternalWorker{Name: "gen-a", URL: newHealthServer(t).URL, Role: disagg.RoleGeneration}
	b := ExternalWorker{Name: "ctx-b", URL: newHealthServer(t).URL, Role: disagg.RoleContext}

	added, removed, err := f.Reconcile("file", []ExternalWorker{a, b})
	require.NoError(t, err)
	require.Equal(t, []string{"ctx-b", "gen-a"}, added)
	require.Empty(t, removed)
	require.Equal(t, []string{"ctx-0", "gen-0", "gen-a", "ctx-b"}, names(f))

	added, removed, err = f.Reconcile("file", []ExternalWorker{a, b})
	require.NoError(t, err)
	require.Empty(t, added, "the same list changes nothing")
	require.Empty(t, removed)

	moved := b
	moved.URL = newHealthServer(t).URL
	added, removed, err = f.Reconcile("file", []ExternalWorker{moved})
	require.NoError(t, err)
	require.Equal(t, []string{"ctx-b"}, added, "a worker at a new URL is added again")
	require.Equal(t, []string{"ctx-b", "gen-a"}, removed)
	require.Equal(t, []string{"ctx-0", "gen-0", "ctx-b"}, names(f), "the plan's workers are not the source's")

	other := ExternalWorker{Name: "gen-e", URL: newHealthServer(t).URL, Role: disagg.RoleGeneration}
	_, _, err = f.Reconcile("etcd", []ExternalWorker{other})
	require.NoError(t, err)
	_, removed, err = f.Reconcile("file", nil)
	require.NoError(t, err)
	require.Equal(t, []string{"ctx-b"}, removed, "another source's workers are left alone")
	require.Equal(t, []string{"ctx-0", "gen-0", "gen-e"}, names(f))
}

func TestReconcileSkipsWhatItCannotAdd(t *testing.T) {
	f := externalFleet(t, time.Hour)
	clash := ExternalWorker{Name: "gen-0", URL: newHealthServer(t).URL, Role: disagg.RoleGeneration}
	ok := ExternalWorker{Name: "gen-z", URL: newHealthServer(t).URL, Role: disagg.RoleGeneration}
	added, _, err := f.Reconcile("file", []ExternalWorker{clash, ok})
	require.ErrorIs(t, err, ErrWorkerExists)
	require.Equal(t, []string{"gen-z"}, added)
	_, removed, err := f.Reconcile("file", nil)
	require.NoError(t, err)
	require.Equal(t, []string{"gen-z"}, removed, "a name it could not add was never the source's")
	require.Equal(t, []string{"ctx-0", "gen-0"}, names(f))
}
