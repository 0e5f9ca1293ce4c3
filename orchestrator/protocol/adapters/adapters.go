package adapters

import (
	"errors"
	"fmt"
	"strings"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/orchestrator/protocol/sglang"
	"github.com/duet-serve/duet/orchestrator/protocol/trtllm"
	"github.com/duet-serve/duet/orchestrator/protocol/vllm"
)

// ErrUnknown is wrapped by ByName's error for a name no adapter has.
var ErrUnknown = errors.New("unknown protocol")

// Names returns the valid adapter names, in a fixed order.
func Names() []string { return []string{trtllm.Name, vllm.Name, sglang.Name} }

// ByName returns a new adapter for name ("trtllm", "vllm" or "sglang"). An
// unknown name gives an error wrapping ErrUnknown that lists the valid
// names.
func ByName(name string) (protocol.Adapter, error) {
	switch name {
	case trtllm.Name:
		return trtllm.New(), nil
	case vllm.Name:
		return vllm.New(), nil
	case sglang.Name:
		return sglang.New(), nil
	}
	return nil, fmt.Errorf("%w %q (valid: %s)", ErrUnknown, name, strings.Join(Names(), ", "))
}
