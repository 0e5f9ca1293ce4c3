package loadgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestArtifactsRoundTrip(t *testing.T) {
	f := newFakeEngine(2)
	cfg := testConfig()
	cfg.NumSessions, cfg.TurnsMean, cfg.Concurrency = 3, 2, 3
	res := runFake(t, f, cfg)
	sum := SummarizeRecords(res.Records)
	dir := filepath.Join(t.TempDir(), "run-a")
	paths, err := WriteArtifacts(dir, res, sum, RunInfo{CLICommand: "duet bench -m test-model", Version: "duet test"})
	require.NoError(t, err)
	require.Len(t, paths, 5)

	var top map[string]json.RawMessage
	readJSON(t, filepath.Join(dir, FileSummaryJSON), &top)
	var ttft map[string]any
	require.NoError(t, json.Unmarshal(top["time_to_first_token"], &ttft))
	for _, k := range append([]string{"unit", "count", "sum"}, StatNames...) {
		require.Contains(t, ttft, k)
	}
	require.Equal(t, 6.0, ttft["count"])
	require.Contains(t, readText(t, filepath.Join(dir, FileSummaryJSON)), `"avg": 6.0`, "floats are written with a fraction, as aiperf writes them")
	var rc map[string]any
	require.NoError(t, json.Unmarshal(top["request_count"], &rc))
	require.Equal(t, map[string]any{"unit": "requests", "avg": 6.0}, rc)
	for _, k := range []string{"schema_version", "benchmark_id", "run_info", "error_summary", "was_cancelled", "input_config", "start_time", "end_time", "duet",
		"cache_hit_ratio", "oracle_hit_ratio", "routing_efficiency", "request_throughput", "benchmark_duration"} {
		require.Contains(t, top, k)
	}
	require.JSONEq(t, `[]`, string(top["error_summary"]))
	var ic struct { // aiperf 0.12.0's BenchmarkConfig layout
		Models struct {
			Items []struct {
				Name string `json:"name"`
			} `json:"items"`
		} `json:"models"`
		Datasets []struct {
			Type    string `json:"type"`
			Entries int    `json:"entries"`
			Turns   struct {
				Mean float64 `json:"mean"`
			} `json:"turns"`
		} `json:"datasets"`
		Phases []struct {
			Name        string `json:"name"`
			Type        string `json:"type"`
			Sessions    int    `json:"sessions"`
			Concurrency int    `json:"concurrency"`
		} `json:"phases"`
	}
	require.NoError(t, json.Unmarshal(top["input_config"], &ic))
	require.Len(t, ic.Models.Items, 1)
	require.Equal(t, "test-model", ic.Models.Items[0].Name)
	require.Len(t, ic.Datasets, 1)
	require.Equal(t, "synthetic", ic.Datasets[0].Type)
	require.Equal(t, 3, ic.Datasets[0].Entries)
	require.Equal(t, 2.0, ic.Datasets[0].Turns.Mean)
	require.Len(t, ic.Phases, 1)
	require.Equal(t, "profiling", ic.Phases[0].Name)
	require.Equal(t, "concurrency", ic.Phases[0].Type)
	require.Equal(t, 3, ic.Phases[0].Sessions)
	require.Equal(t, 3, ic.Phases[0].Concurrency)

	csvText := readText(t, filepath.Join(dir, FileSummaryCSV))
	sections := strings.Split(csvText, "\r\n\r\n")
	require.Len(t, sections, 2, "aiperf's two sections, CRLF")
	require.True(t, strings.HasPrefix(sections[0], "Metric,avg,min,max,sum,p1,p5,p10,p25,p50,p75,p90,p95,p99,std\r\n"))
	require.Contains(t, sections[0], "\r\nTime to First Token (ms),1.00,")
	require.Less(t, strings.Index(sections[0], "Input Sequence Length"), strings.Index(sections[0], "Request Latency"), "rows sorted by tag")
	require.True(t, strings.HasPrefix(sections[1], "Metric,Value\r\n"))
	require.Contains(t, sections[1], "\r\nRequest Count,6.00\r\n")

	lines := readLines(t, filepath.Join(dir, FileRecords))
	require.Len(t, lines, 6)
	for _, l := range lines {
		var rec struct {
			Metadata map[string]any            `json:"metadata"`
			Metrics  map[string]map[string]any `json:"metrics"`
			Error    any                       `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &rec))
		for _, k := range []string{"session_num", "x_request_id", "x_correlation_id", "conversation_id", "turn_index",
			"request_start_ns", "request_ack_ns", "request_end_ns", "benchmark_phase", "was_cancelled"} {
			require.Contains(t, rec.Metadata, k)
		}
		require.Nil(t, rec.Error)
		require.NotContains(t, l, `"error"`, "no error key on success, as aiperf writes it")
		require.Equal(t, "ms", rec.Metrics["time_to_first_token"]["unit"])
		require.Contains(t, rec.Metrics, "usage_prompt_cache_read_tokens")
	}

	var inputs struct {
		Data []struct {
			SessionID string            `json:"session_id"`
			Payloads  []json.RawMessage `json:"payloads"`
		} `json:"data"`
	}
	readJSON(t, filepath.Join(dir, FileInputs), &inputs)
	require.Len(t, inputs.Data, 3)
	require.Len(t, inputs.Data[0].Payloads, 2)

	html := readText(t, filepath.Join(dir, FileReport))
	require.Equal(t, 3, strings.Count(html, "<svg"), "TTFT by turn, TTFT CDF, hit ratio")
	for _, external := range []string{"<script", "src=", "href=", "<link"} {
		require.NotContains(t, html, external, "the report opens offline")
	}

	// compare: the run twice under one label is merged into medians.
	dirB := filepath.Join(t.TempDir(), "run-b")
	_, err = WriteArtifacts(dirB, res, sum, RunInfo{Label: "run-a"})
	require.NoError(t, err)
	a, err := ReadRunSummary(dir)
	require.NoError(t, err)
	b, err := ReadRunSummary(dirB)
	require.NoError(t, err)
	require.Equal(t, "run-a", a.Label, "the label defaults to the directory name")
	require.Equal(t, 6.0, a.Values["request_count.avg"])
	var out bytes.Buffer
	Compare(&out, []*RunSummary{a, b}, true)
	require.Contains(t, out.String(), "| metric | run-a (median of 2) |")
	require.Contains(t, out.String(), "| requests | 6 |")
}

func TestPrintSummaryAndProgressLine(t *testing.T) {
	now := time.Now()
	recs := []Record{
		{Phase: PhaseProfiling, Streaming: true, Start: now, ContentChunks: 3, FirstContent: 40 * time.Millisecond,
			SecondContent: 50 * time.Millisecond, LastContent: 60 * time.Millisecond, HasUsage: true, PromptTokens: 100,
			CompletionTokens: 3, ClientPromptTokens: 100},
		{Phase: PhaseProfiling, Streaming: true, Start: now, TurnIndex: 1, ContentChunks: 3, FirstContent: 20 * time.Millisecond,
			SecondContent: 25 * time.Millisecond, LastContent: 40 * time.Millisecond, HasUsage: true, PromptTokens: 200,
			CachedTokens: 96, CompletionTokens: 3, ClientPromptTokens: 200, OracleTokens: 96},
		{Phase: PhaseProfiling, Start: now, End: now.Add(time.Second), TurnIndex: 2,
			Err: &ErrorDetails{Type: ErrTruncated, Message: "stream ended"}},
	}
	sum := SummarizeRecords(recs)
	require.InDelta(t, 96.0/300, *sum.Metric("cache_hit_ratio").Value, 1e-12)
	require.InDelta(t, 1.0, *sum.Metric("routing_efficiency").Value, 1e-12)
	require.Equal(t, 1.0, *sum.Metric("error_request_count").Value)
	require.Equal(t, []ErrorCount{{Details: ErrorDetails{Type: ErrTruncated, Message: "stream ended"}, Count: 1}}, sum.Errors)
	var out bytes.Buffer
	PrintSummary(&out, sum)
	text := out.String()
	for _, want := range []string{"duet bench | LLM Metrics", "Time to First Token (ms)", "TTFT, Later Turns (ms)",
		"Routing Efficiency (ratio)", "TTFT and KV cache reuse by turn", "TruncatedStream"} {
		require.Contains(t, text, want)
	}
	require.Equal(t, "1,234,567.89", number(1234567.891, "ms"))

	p := &phase{name: PhaseProfiling}
	p.done.Store(30)
	b := &progressBar{p: p, total: 120}
	require.Equal(t, "Profiling: 30/120 |██████░░░░░░░░░░░░░░░░░░|  25% [00:10<00:30] errors 0, in flight 0", b.line(10*time.Second))
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, v), path)
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}
