package orchestrator

import "github.com/duet-serve/duet/proto/openai"

// fastjson wraps its error once per nesting level around the error of the
// level below, so a syntax error deep in a body costs allocation
// quadratic in the depth: 4.5 MB for a 2 KB body of 300 brackets (found by
// FuzzCompleteResponse). Bodies nested deeper than these limits are
// refused (openai.CheckDepth) before fastjson sees them. Client requests
// deeper than fastjson's own limit of 300 could not be read anyway.
const (
	maxWorkerDepth  = openai.MaxWorkerDepth
	maxRequestDepth = 300
)
