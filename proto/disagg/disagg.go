// Package disagg holds the engines' disaggregation wire types: TensorRT-LLM's
// disaggregated_params, vLLM's kv_transfer_params and SGLang's bootstrap
// fields, the worker Role, and the opaque KV transfer Handle.
//
// The orchestrator relays engine-produced values as raw JSON; these typed
// forms are for the simulated worker, for validation and for tests.
package disagg

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Role is what a worker does in a disaggregated deployment.
type Role string

// Worker roles. A mixed worker serves both phases (and plain requests).
const (
	RoleContext    Role = "context"
	RoleGeneration Role = "generation"
	RoleMixed      Role = "mixed"
)

// Roles lists the valid roles, for error messages.
var Roles = []Role{RoleContext, RoleGeneration, RoleMixed}

// ParseRole parses a role name; the error lists the valid names.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown role %q (valid: %s)", s, joinRoles())
}

func joinRoles() string {
	names := make([]string, len(Roles))
	for i, r := range Roles {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// ServesContext reports whether the role accepts context-only requests.
func (r Role) ServesContext() bool { return r == RoleContext || r == RoleMixed }

// ServesGeneration reports whether the role accepts generation-only requests.
func (r Role) ServesGeneration() bool { return r == RoleGeneration || r == RoleMixed }

// Handle is an opaque KV transfer handle as a context worker returned it:
// TensorRT-LLM's choices[0].disaggregated_params or vLLM's
// kv_transfer_params, kept as raw JSON and never decoded by the orchestrator.
type Handle = json.RawMessage
