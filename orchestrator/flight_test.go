package orchestrator

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestAccessLogNamesTheWorkersRequestID(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	ctx := newFakeWorker(t, ctxOK)
	h := newHarness(t, testConfig(), []*fakeWorker{ctx}, []*fakeWorker{newFakeWorker(t, genStream(2, true))})
	h.o.access = zap.New(core)
	resp, _ := h.run(testChatBody(false, ""), nil)
	require.Equal(t, http.StatusOK, resp.Status)
	var params struct {
		ID uint64 `json:"disagg_request_id"`
	}
	require.NoError(t, json.Unmarshal(ctx.calls()[0]["disaggregated_params"], &params))
	line := logs.FilterMessage("request").All()
	require.Len(t, line, 1)
	fields := line[0].ContextMap()
	require.Equal(t, "r1", fields["request_id"], "the client's id")
	require.Equal(t, params.ID, fields["worker_request_id"], "the id the workers got")
	require.EqualValues(t, 0, fields["migrations"])
}
