package openai

import (
	"bytes"
	"fmt"
)

// CheckDepth returns an error when data, JSON or not, nests arrays and
// objects more than max deep; brackets inside strings do not count. Parsers
// whose cost grows faster than the body with its depth (fastjson's error
// text is quadratic in it, encoding/json keeps a stack per level) are
// guarded with it. Most bodies hold fewer brackets than max and are passed
// after two vectorised counts.
func CheckDepth(data []byte, max int) error {
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

// MaxWorkerDepth bounds the nesting of a worker's response body duet reads.
// Engines' responses nest at most about 9 deep (chat logprobs: choices,
// logprobs, content, top_logprobs, bytes). It was 64 until FuzzCompleteResponse
// found a 259-byte body nested 40 deep whose fastjson error allocated
// 104 KB (fastjson quotes the unparsed tail once per level).
const MaxWorkerDepth = 32
