package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// RunSummary is a finished run read back from its artifact directory.
type RunSummary struct {
	Dir, Label string
	// Values maps "tag.stat" (time_to_first_token.p50, request_count.avg)
	// to its value.
	Values map[string]float64
}

// ReadRunSummary reads dir's profile_export_aiperf.json (from duet bench or
// from aiperf itself).
func ReadRunSummary(dir string) (*RunSummary, error) {
	b, err := os.ReadFile(filepath.Join(dir, FileSummaryJSON))
	if err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, FileSummaryJSON), err)
	}
	rs := &RunSummary{Dir: dir, Label: filepath.Base(filepath.Clean(dir)), Values: map[string]float64{}}
	if records, ok := top["records"]; ok { // aiperf's older layout nests the metrics
		var nested map[string]json.RawMessage
		if json.Unmarshal(records, &nested) == nil {
			for k, v := range nested {
				top[k] = v
			}
		}
	}
	for tag, raw := range top {
		var m map[string]any
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		if _, ok := m["unit"]; !ok {
			continue
		}
		for stat, v := range m {
			if f, ok := v.(float64); ok {
				rs.Values[tag+"."+stat] = f
			}
		}
	}
	var duet struct {
		Label string `json:"label"`
	}
	if raw, ok := top["duet"]; ok && json.Unmarshal(raw, &duet) == nil && duet.Label != "" {
		rs.Label = duet.Label
	}
	return rs, nil
}

// compareRows are the values `duet bench compare` shows.
var compareRows = []struct{ key, name, unit string }{
	{"time_to_first_token.p50", "TTFT p50 (ms)", "ms"},
	{"time_to_first_token.p99", "TTFT p99 (ms)", "ms"},
	{"time_to_first_token_first_turn.p50", "TTFT turn 0 p50 (ms)", "ms"},
	{"time_to_first_token_first_turn.p99", "TTFT turn 0 p99 (ms)", "ms"},
	{"time_to_first_token_later_turns.p50", "TTFT turns ≥1 p50 (ms)", "ms"},
	{"time_to_first_token_later_turns.p99", "TTFT turns ≥1 p99 (ms)", "ms"},
	{"inter_token_latency.p50", "ITL p50 (ms)", "ms"},
	{"request_latency.p50", "request latency p50 (ms)", "ms"},
	{"request_latency.p99", "request latency p99 (ms)", "ms"},
	{"cache_hit_ratio.avg", "cache hit ratio", "ratio"},
	{"oracle_hit_ratio.avg", "oracle hit ratio", "ratio"},
	{"routing_efficiency.avg", "routing efficiency", "ratio"},
	{"request_throughput.avg", "request throughput (req/s)", "requests/sec"},
	{"output_token_throughput.avg", "output token throughput (tok/s)", "tokens/sec"},
	{"request_count.avg", "requests", "requests"},
	{"error_request_count.avg", "errors", "requests"},
}

// Compare prints runs side by side, one column per label: runs that share a
// label (repeats of one configuration) show the median of each value.
// markdown selects a Markdown table instead of a box-drawn one.
func Compare(w io.Writer, runs []*RunSummary, markdown bool) {
	var labels []string
	groups := map[string][]*RunSummary{}
	for _, r := range runs {
		if _, ok := groups[r.Label]; !ok {
			labels = append(labels, r.Label)
		}
		groups[r.Label] = append(groups[r.Label], r)
	}
	header := []string{"metric"}
	for _, l := range labels {
		if n := len(groups[l]); n > 1 {
			l = fmt.Sprintf("%s (median of %d)", l, n)
		}
		header = append(header, l)
	}
	var rows [][]string
	for _, cr := range compareRows {
		row := []string{cr.name}
		any := false
		for _, l := range labels {
			var xs []float64
			for _, r := range groups[l] {
				if v, ok := r.Values[cr.key]; ok {
					xs = append(xs, v)
				}
			}
			if len(xs) == 0 {
				row = append(row, "-")
				continue
			}
			any = true
			sort.Float64s(xs)
			row = append(row, valueNumber(Percentile(xs, 50), cr.unit, number))
		}
		if any {
			rows = append(rows, row)
		}
	}
	if markdown {
		fmt.Fprintln(w, "| "+strings.Join(header, " | ")+" |")
		sep := make([]string, len(header))
		for i := range sep {
			sep[i] = "---:"
		}
		sep[0] = "---"
		fmt.Fprintln(w, "| "+strings.Join(sep, " | ")+" |")
		for _, r := range rows {
			fmt.Fprintln(w, "| "+strings.Join(r, " | ")+" |")
		}
		return
	}
	(&table{header: header, rows: rows}).write(w)
}
