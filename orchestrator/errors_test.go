package orchestrator

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Regression (issue 10): a worker's 400 with an integer code came back
// double-encoded: duet's error type wanted a string code, the parse
// failed and the whole raw body became the message.
func TestRelayedErrorKeepsTheWorkersError(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{name: "OpenAI shape with an integer code (vLLM >= 0.10.1, llm-d sim)", status: 400,
			body: `{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"BadRequestError","param":null,"code":400}}`,
			want: `{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"BadRequestError","param":null,"code":400}}`},
		{name: "vLLM's older flat shape", status: 400,
			body: `{"object": "error", "message": "prompt too long", "type": "BadRequestError", "param": "messages", "code": 400}`,
			want: `{"error":{"message":"prompt too long","type":"BadRequestError","param":"messages","code":400}}`},
		{name: "string code kept", status: 404,
			body: `{"error":{"message":"no such model","type":"NotFoundError","code":"model_not_found"}}`,
			want: `{"error":{"message":"no such model","type":"NotFoundError","param":null,"code":"model_not_found"}}`},
		{name: "error as a string (TensorRT-LLM validation, vLLM auth)", status: 401,
			body: `{"error":"Unauthorized"}`,
			want: `{"error":{"message":"Unauthorized","type":"invalid_request_error","param":null,"code":null}}`},
		{name: "FastAPI detail string", status: 404, body: `{"detail":"Not Found"}`,
			want: `{"error":{"message":"Not Found","type":"not_found_error","param":null,"code":null}}`},
		{name: "FastAPI validation list", status: 422,
			body: `{"detail":[{"loc":["body","messages",0],"msg":"field required","type":"missing"}]}`,
			want: `{"error":{"message":"body.messages.0: field required","type":"invalid_request_error","param":null,"code":null}}`},
		{name: "text/plain", status: 500, body: "Internal Server Error",
			want: `{"error":{"message":"context worker answered status 500: Internal Server Error","type":"server_error","param":null,"code":null}}`},
		{name: "empty body", status: 503, body: "",
			want: `{"error":{"message":"context worker answered status 503 with an empty body","type":"service_unavailable_error","param":null,"code":null}}`},
		{name: "JSON without a message", status: 400, body: `{"foo":1}`,
			want: `{"error":{"message":"context worker answered status 400: {\"foo\":1}","type":"invalid_request_error","param":null,"code":null}}`},
		{name: "a code that is an object is dropped", status: 400, body: `{"error":{"message":"m","code":{"x":1}}}`,
			want: `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := relayedError(phaseContext, tc.status, []byte(tc.body))
			require.Equal(t, tc.status, e.Status)
			require.JSONEq(t, tc.want, string(e.JSON()))
		})
	}
}

func TestWorker4xxReachesTheClientAsItsOwnError(t *testing.T) {
	we := &workerError{phase: phaseContext, worker: "ctx-0", status: http.StatusBadRequest,
		body: []byte(`{"error":{"message":"prompt too long","type":"BadRequestError","param":null,"code":400}}`)}
	e := we.clientError()
	require.Equal(t, http.StatusBadRequest, e.Status)
	require.JSONEq(t, `{"error":{"message":"prompt too long","type":"BadRequestError","param":null,"code":400}}`, string(e.JSON()))
	require.ErrorIs(t, e, we)
}
