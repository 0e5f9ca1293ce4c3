package wire

import (
	"fmt"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/disagg"
)

// ClientBody validates in and decodes its body with every
// disagg.InternalFields key removed, so that no client value for a field
// duet owns reaches a worker even if the caller forgot to strip it. Errors
// wrap protocol.ErrBadInput and name adapter. The Object aliases in.Body:
// encode it before the call returns (Encode's result does not alias).
func ClientBody(adapter string, in protocol.Input) (Object, error) {
	if err := in.Validate(); err != nil {
		return Object{}, fmt.Errorf("%s: %w", adapter, err)
	}
	body, err := DecodeObjectNoCopy(in.Body)
	if err != nil {
		return Object{}, fmt.Errorf("%s: %w: body: %w", adapter, protocol.ErrBadInput, err)
	}
	body.Delete(disagg.InternalFields...)
	return body, nil
}
