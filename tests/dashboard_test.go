package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDashboardQueriesOnlyExportedSeries checks configs/grafana-dashboard.json:
// every duet_* series its queries name is one duet's code registers (a
// "duet_..." string literal in a non-test Go file outside tests/), with the
// histogram suffixes _bucket, _sum and _count.
func TestDashboardQueriesOnlyExportedSeries(t *testing.T) {
	raw, err := os.ReadFile("../configs/grafana-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Panels)

	exported := exportedSeries(t)
	series := regexp.MustCompile(`duet_[a-z0-9_]+`)
	queried := 0
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			for _, name := range series.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
				require.True(t, exported[base], "panel %q queries %s, which duet does not export", p.Title, name)
				queried++
			}
		}
	}
	require.Greater(t, queried, 20)
}

// exportedSeries returns the metric names duet's code registers.
func exportedSeries(t *testing.T) map[string]bool {
	names := map[string]bool{}
	lit := regexp.MustCompile(`"(duet_[a-z0-9_]+)"`)
	for _, root := range []string{"../orchestrator", "../router", "../cmd", "../workers"} {
		require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			for _, m := range lit.FindAllStringSubmatch(string(src), -1) {
				names[m[1]] = true
			}
			return err
		}))
	}
	require.True(t, names["duet_ttft_by_route_seconds"])
	return names
}
