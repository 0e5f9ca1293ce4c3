package orchestrator

import (
	"bytes"
	"fmt"
)

// fastjson wraps its error once per nesting level around the error of the
// level below, so a syntax error deep in a body costs allocation
// quadratic in the depth: 4.5 MB for a 2 KB body of 300 brackets (found by
// FuzzCompleteResponse). Bodies nested deeper than these limits are
// refused before fastjson sees them. Engines' responses nest about 8 deep
// (logprobs); client requests deeper than fastjson's own limit of 300
// could not be read anyway.
const (
	maxWorkerDepth  = 64
	maxRequestDepth = 300
)

// checkDepth returns an error when data, JSON or not, nests arrays and
// objects more than max deep. Brackets inside strings do not count. Most
// bodies hold fewer brackets than max and are passed after two vectorised
// counts.
func checkDepth(data []byte, max int) error {
	if bytes.Count(data, []byte{'['})+bytes.Count(data, []byte{'{'}) <= max {
		return nil
	}
	depth := 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > max {
				return fmt.Errorf("JSON nested more than %d deep", max)
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return nil
}
