package loadgen

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReportCellsForPeople(t *testing.T) {
	require.Equal(t, []string{"Request Count", "12,345", "999", "1,000", "-1,234,567", "3.5", "-"},
		grouped([]string{"Request Count", "12345", "999", "1000", "-1234567", "3.5", "-"}))
	c := Config{URLs: []string{"http://127.0.0.1:8000", "http://10.0.0.2:8000/"}, EndpointType: "chat"}
	require.Equal(t, "http://127.0.0.1:8000"+c.endpointPath()+", http://10.0.0.2:8000"+c.endpointPath(), endpointURLs(c))
}
