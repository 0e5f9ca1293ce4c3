package router

import (
	"testing"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/stretchr/testify/require"
)

// Without a store the clock is what this replica booked.
func TestCacheClockCountsBookings(t *testing.T) {
	ep := NewEndpoint("ctx-0", "", disagg.RoleContext)
	ep.TouchCache(300)
	ep.TouchCache(-5)
	ep.TouchCache(200)
	require.Equal(t, int64(500), ep.CacheClock())
}

// With a store, the clock is the fleet's total plus what this replica
// booked since; bookings are sent once, also when a sync fails; and a
// reading never goes back, also when the store loses its count.
func TestCacheClockFollowsTheStoresTotal(t *testing.T) {
	ep := NewEndpoint("ctx-0", "", disagg.RoleContext)
	ep.TouchCache(100)
	require.Equal(t, int64(100), ep.TakeCacheTouches())
	ep.TouchCache(7) // booked while the sync is under way
	require.Equal(t, int64(107), ep.CacheClock(), "what is being sent still counts")
	ep.CacheTouchesSynced(1100) // the other replicas had booked 1000
	require.Equal(t, int64(1107), ep.CacheClock())

	require.Equal(t, int64(7), ep.TakeCacheTouches()) // a sync that fails
	require.Equal(t, int64(1107), ep.CacheClock())
	require.Equal(t, int64(7), ep.TakeCacheTouches(), "sent again, once")
	ep.CacheTouchesSynced(1107)
	require.Equal(t, int64(1107), ep.CacheClock())

	ep.TouchCache(10)
	require.Equal(t, int64(10), ep.TakeCacheTouches())
	ep.CacheTouchesSynced(10) // the store restarted empty
	require.Equal(t, int64(1117), ep.CacheClock(), "the clock goes on from where it was")
	require.Zero(t, ep.TakeCacheTouches())
	ep.CacheTouchesSynced(60) // others booked 50 since
	require.Equal(t, int64(1167), ep.CacheClock())
}
