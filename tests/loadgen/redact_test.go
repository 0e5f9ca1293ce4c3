package loadgen

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedactArgs(t *testing.T) {
	in := []string{"bench", "-m", "M", "--api-key", "sk-123", "--api-key=sk-456", "-H", "Authorization: Bearer x",
		"--header", "X-Trace: 1", "-H", `{"X-Api-Key": "k"}`, "--url", "http://user:pw@h:1,http://h2:2", "-u=https://a:b@h3",
		"--streaming", "--api-key"}
	require.Equal(t, []string{"bench", "-m", "M", "--api-key", "<redacted>", "--api-key=<redacted>", "-H", "Authorization:<redacted>",
		"--header", "X-Trace: 1", "-H", "<redacted>", "--url", "http://<redacted>@h:1,http://h2:2", "-u=https://<redacted>@h3",
		"--streaming", "--api-key"}, RedactArgs(in))
}
