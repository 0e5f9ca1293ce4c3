package orchestrator

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/internal/allocs"
	"github.com/duet-serve/duet/orchestrator/protocol"
)

// Regression (issue 12, found by FuzzCompleteResponse and FuzzParse):
// fastjson's error for a body nested 300 deep allocated 4.5 MB for 2 KB.
func TestDeepBodiesCostLittle(t *testing.T) {
	deep := strings.Repeat("[", 2000) + "x"
	allocated := allocs.By(len(deep), func() {
		_, _, err := completeResponse([]byte(deep), nil)
		require.Error(t, err)
	})
	require.Less(t, allocated, uint64(64<<10), "a deep worker body allocated %d bytes", allocated)
	allocated = allocs.By(len(deep), func() { readWorkerError(500, []byte(deep)) })
	require.Less(t, allocated, uint64(64<<10), "a deep worker error allocated %d bytes", allocated)

	o := fuzzOrchestrator(t)
	body := []byte(`{"model":"m","prompt":"hi","extra":` + strings.Repeat("[", 301) + strings.Repeat("]", 301) + `}`)
	var err error
	allocated = allocs.By(len(body), func() {
		_, err = o.parse(Incoming{Endpoint: protocol.EndpointCompletions, Body: body, RequestID: "r"})
	})
	require.ErrorContains(t, err, "nested more than 300 deep")
	require.Less(t, allocated, uint64(256<<10), "a deep request allocated %d bytes", allocated)
}

// Regression (issue 12, found by FuzzCompleteResponse): within the depth
// limit, fastjson still quoted the whole unparsed tail once per level: a
// 392-byte garbage body 21 deep allocated 91 KB. Whole bodies, and events
// of strictFrom bytes or more, are validated first.
func TestGarbageWithinTheDepthLimitCostsLittle(t *testing.T) {
	garbage := strings.Repeat("[", 30) + "n" + strings.Repeat("\x90\x01", 2000)
	allocated := allocs.By(len(garbage), func() {
		_, _, err := completeResponse([]byte(garbage), nil)
		require.ErrorContains(t, err, "not valid JSON")
	})
	require.Less(t, allocated, uint64(16<<10), "a garbage worker body allocated %d bytes", allocated)
	r := getChunkReader()
	defer putChunkReader(r)
	allocated = allocs.By(len(garbage), func() {
		_, err := r.read([]byte(garbage))
		require.ErrorIs(t, err, errInvalidJSON)
	})
	require.Less(t, allocated, uint64(16<<10), "a garbage event allocated %d bytes", allocated)
}
