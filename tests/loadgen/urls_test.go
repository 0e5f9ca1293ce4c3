package loadgen

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestURLStrategies: with several --url, round_robin keeps each session on
// the URL its first turn got (aiperf's behaviour) and turn_round_robin
// sends every request to the next URL; the summary counts requests per
// URL. One session at a time, so the order of requests is fixed.
func TestURLStrategies(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		want     [][]string // hosts of each session's turns, in order
	}{
		{URLRoundRobin, [][]string{{"a", "a", "a"}, {"b:81", "b:81", "b:81"}, {"a", "a", "a"}, {"b:81", "b:81", "b:81"}}},
		{URLTurnRoundRobin, [][]string{{"a", "b:81", "a"}, {"b:81", "a", "b:81"}, {"a", "b:81", "a"}, {"b:81", "a", "b:81"}}},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			f := newFakeEngine(3)
			cfg := testConfig()
			cfg.URLs, cfg.URLStrategy = []string{"http://a", "b:81/"}, tc.strategy
			cfg.NumSessions, cfg.TurnsMean, cfg.Concurrency = 4, 3, 1
			res := runFake(t, f, cfg)
			got := make([][]string, len(tc.want))
			byCorr := map[string]int{}
			for _, r := range f.reqs {
				i, ok := byCorr[r.corrID]
				if !ok {
					i = len(byCorr)
					byCorr[r.corrID] = i
				}
				got[i] = append(got[i], r.host)
			}
			require.Equal(t, tc.want, got)
			sum := SummarizeRecords(res.Records)
			require.Equal(t, []URLCount{{URL: "http://a", Requests: 6}, {URL: "http://b:81", Requests: 6}}, sum.URLs)
		})
	}
}

func TestURLValidation(t *testing.T) {
	cfg := testConfig()
	cfg.URLs = nil
	require.ErrorContains(t, cfg.Validate(), "--url: required")
	cfg.URLs = []string{"http://a", ""}
	require.ErrorContains(t, cfg.Validate(), "--url: required, and no URL may be empty")
	cfg.URLs, cfg.URLStrategy = []string{"http://a"}, "random"
	require.ErrorContains(t, cfg.Validate(), `--url-strategy: unknown strategy "random" (valid: round_robin, turn_round_robin)`)
}
