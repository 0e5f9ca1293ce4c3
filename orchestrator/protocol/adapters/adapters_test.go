package adapters_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/protocol/adapters"
)

func TestByName(t *testing.T) {
	require.Equal(t, []string{"trtllm", "vllm", "sglang"}, adapters.Names())
	for _, name := range adapters.Names() {
		t.Run(name, func(t *testing.T) {
			a, err := adapters.ByName(name)
			require.NoError(t, err)
			require.Equal(t, name, a.Name())
			require.Equal(t, name == "sglang", a.Concurrent())
		})
	}
}

func TestByNameUnknown(t *testing.T) {
	for _, name := range []string{"", "TRTLLM", "sim", "vllm "} {
		a, err := adapters.ByName(name)
		require.Nil(t, a)
		require.ErrorIs(t, err, adapters.ErrUnknown)
		require.ErrorContains(t, err, "(valid: trtllm, vllm, sglang)")
	}
	_, err := adapters.ByName("sim")
	require.EqualError(t, err, `unknown protocol "sim" (valid: trtllm, vllm, sglang)`)
}
