package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/workers"
)

// A worker's side port is its SGLang bootstrap port only under protocol
// sglang; under vllm it is the NIXL side channel, which the router has no
// use for.
func TestMembersCarryBootstrapPortsUnderSGLangOnly(t *testing.T) {
	ws := []workers.Worker{
		{Name: "ctx-0", Role: disagg.RoleContext, URL: "http://127.0.0.1:8100", SidePort: 5600, State: workers.StateUp},
		{Name: "gen-0", Role: disagg.RoleGeneration, URL: "http://127.0.0.1:8200", State: workers.StateStarting},
	}
	require.Equal(t, []router.Member{
		{ID: "ctx-0", URL: "http://127.0.0.1:8100", Role: disagg.RoleContext, BootstrapPort: 5600, Healthy: true},
		{ID: "gen-0", URL: "http://127.0.0.1:8200", Role: disagg.RoleGeneration},
	}, members(ws, "sglang"))
	require.Zero(t, members(ws, "vllm")[0].BootstrapPort)
}

// A worker the admin API removed is no member; it stays in the snapshot as
// a running process.
func TestMembersLeaveOutRemovedWorkers(t *testing.T) {
	ws := []workers.Worker{
		{Name: "ctx-0", Role: disagg.RoleContext, URL: "http://127.0.0.1:8100", State: workers.StateUp, Removed: true},
		{Name: "gen-0", Role: disagg.RoleGeneration, URL: "http://127.0.0.1:8200", State: workers.StateUp},
	}
	require.Equal(t, []router.Member{
		{ID: "gen-0", URL: "http://127.0.0.1:8200", Role: disagg.RoleGeneration, Healthy: true},
	}, members(ws, "trtllm"))
}
