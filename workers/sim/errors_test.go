package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJSONPath pins the bug where a type error inside the embedded
// engineFields (lower-case Go name) named its param
// "engineFields.bootstrap_room" instead of "bootstrap_room".
func TestJSONPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"max_tokens", "max_tokens"},
		{"ChatRequest.max_tokens", "max_tokens"},
		{"engineFields.bootstrap_room", "bootstrap_room"},
		{"engineFields.kv_transfer_params.remote_port", "kv_transfer_params.remote_port"},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) { require.Equal(t, tt.want, jsonPath(tt.in)) })
	}
}
