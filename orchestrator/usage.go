package orchestrator

import (
	"encoding/json"
	"fmt"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/openai"
)

// completeResponse reads a gen worker's whole (non-streaming) 2xx response
// and returns the body the client gets and the usage it reports: usage
// carries the context phase's prompt and cached tokens (the gen worker
// only saw a KV transfer), a non-OpenAI finish reason becomes "stop". A
// body that is not a JSON object, an error object, or a failure finish
// reason (abort, error, ...) is an error: the gen worker failed. The
// returned body is body itself or a new slice.
//
// The body is validated first: fastjson accepts some invalid JSON (which
// the client would then get), and its error text quotes the unparsed tail
// once per level of nesting, so a garbage body cost up to about a hundred
// times its size (FuzzCompleteResponse: 91 KB for 392 bytes nested 21
// deep). Validation is one pass over a body read once per request. No
// engine variant is refused by it: vLLM, SGLang and TensorRT-LLM answer a
// whole body with Starlette's JSONResponse, which renders with
// json.dumps(allow_nan=False) (starlette/responses.py), so only valid JSON
// leaves them (a NaN there is a 500 on the engine, not a body).
func completeResponse(body []byte, c *protocol.Context) ([]byte, openai.Usage, error) {
	if !json.Valid(body) {
		return nil, openai.Usage{}, fmt.Errorf("response is not valid JSON: %s", truncate(body, 200))
	}
	r := getChunkReader()
	defer putChunkReader(r)
	ch, err := r.parse(body) // validated above
	switch {
	case err != nil:
		return nil, openai.Usage{}, fmt.Errorf("response is not a JSON object (%v): %s", err, truncate(body, 200))
	case ch.isError:
		return nil, openai.Usage{}, fmt.Errorf("200 response carries an error: %s", relayedError(phaseGeneration, 200, body).Message)
	case ch.failed:
		return nil, openai.Usage{}, fmt.Errorf("finish_reason %q: the worker gave up on the request", ch.finish)
	}
	out, u := r.rewrite(body, ch, c)
	if len(out) > 0 && &out[0] != &body[0] {
		out = append([]byte(nil), out...) // r's buffer goes back to the pool
	}
	return out, u, nil
}
