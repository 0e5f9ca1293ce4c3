package redisstore

import (
	"testing"
	"time"

	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/router/redisstore/redistest"
	"github.com/stretchr/testify/require"
)

// The bucket script on a real Redis: full at first, refuses at or below
// zero, settles (charges or refunds) unconditionally, and is one bucket
// for every replica.
func TestSharedTokenBucket(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	b.syncNow()
	ok, level, err := a.store.TakeTokens("acme:in", 0.001, 1000, 600, false) // refills 1 token per 1,000 s
	require.NoError(t, err)
	require.True(t, ok)
	require.InDelta(t, 400, level, 0.01)
	ok, level, err = b.store.TakeTokens("acme:in", 0.001, 1000, 600, false)
	require.NoError(t, err)
	require.True(t, ok, "above zero: the charge may take it below")
	require.InDelta(t, -200, level, 0.01)
	ok, level, err = a.store.TakeTokens("acme:in", 0.001, 1000, 1, false)
	require.NoError(t, err)
	require.False(t, ok)
	require.InDelta(t, -200, level, 0.01, "a refusal charges nothing")
	_, level, err = b.store.TakeTokens("acme:in", 0.001, 1000, -300, true)
	require.NoError(t, err)
	require.InDelta(t, 100, level, 0.01, "a settlement refunds")
	_, level, err = a.store.TakeTokens("beta:in", 0.001, 1000, 1, false)
	require.NoError(t, err)
	require.InDelta(t, 999, level, 0.01, "another tenant's bucket")
}

func TestSharedLeases(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newReplica(t, srv.Addr(), time.Minute)
	a.syncNow()
	b.syncNow()
	require.NotEqual(t, a.store.LeaseOwner(), b.store.LeaseOwner())
	for _, r := range []*replica{a, b} {
		ok, err := r.store.AcquireLease("acme", r.store.LeaseOwner()+":1", 2, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
	}
	ok, err := a.store.AcquireLease("acme", a.store.LeaseOwner()+":2", 2, time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "two leases live across the replicas")
	require.NoError(t, b.store.ReleaseLease("acme", b.store.LeaseOwner()+":1"))
	ok, err = a.store.AcquireLease("acme", a.store.LeaseOwner()+":2", 2, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)

	// A lease not renewed expires: a killed replica frees its slots.
	ok, err = a.store.AcquireLease("short", "x", 1, 50*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, a.store.RenewLeases("short", []string{"x"}, 50*time.Millisecond))
	require.Eventually(t, func() bool {
		ok, err := b.store.AcquireLease("short", "y", 1, time.Minute)
		return err == nil && ok
	}, 5*time.Second, 10*time.Millisecond)
}

// Several models on one Redis: each store's routing state is in its own
// scope, and the tenant limits are shared by every scope.
func TestScopesKeepModelsApartButShareLimits(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newReplica(t, srv.Addr(), time.Minute), newScopedReplica(t, srv.Addr(), "m:other:")
	a.syncNow()
	b.syncNow()
	a.saveNow(router.SessionRecord{Key: "conv-1", Ctx: "http://127.0.0.1:9100", Gen: "http://127.0.0.1:9200"})
	_, found, err := a.store.Find("conv-1")
	require.NoError(t, err)
	require.True(t, found)
	_, found, err = b.store.Find("conv-1")
	require.NoError(t, err)
	require.False(t, found, "another model's session")

	_, level, err := a.store.TakeTokens("acme:in", 0.001, 1000, 600, false)
	require.NoError(t, err)
	require.InDelta(t, 400, level, 0.01)
	_, level, err = b.store.TakeTokens("acme:in", 0.001, 1000, 100, false)
	require.NoError(t, err)
	require.InDelta(t, 300, level, 0.01, "the tenant's one bucket")
}
