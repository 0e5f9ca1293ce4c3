package tests

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// aiperfStats are the fields of every distribution metric in
// profile_export_aiperf.json (PROTOCOLS.md §4).
var aiperfStats = []string{"unit", "avg", "min", "max", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "std", "count", "sum"}

// TestBenchMultiTurnAgainstServe runs `duet bench` as a process against
// `duet serve` over sim workers: 30 sessions x 5 turns must complete with no
// error, and every export file must carry aiperf's fields.
func TestBenchMultiTurnAgainstServe(t *testing.T) {
	d := startServe(t, serveOptions{})
	dir := filepath.Join(t.TempDir(), "artifacts")
	out := runBench(t, "bench", "-m", "meta-llama/Llama-3.1-8B-Instruct", "--url", d.url, "--streaming",
		"--num-sessions", "30", "--session-turns-mean", "5", "--session-turn-delay-mean", "20",
		"--shared-system-prompt-length", "200", "--user-context-prompt-length", "100", "--isl", "60", "--osl", "12",
		"--extra-inputs", "ignore_eos:true", "--concurrency", "8", "--warmup-request-count", "3",
		"--random-seed", "5", "--label", "e2e", "--artifact-dir", dir, "--no-progress")
	require.Contains(t, out, "duet bench | LLM Metrics")

	summary := checkSummaryJSON(t, filepath.Join(dir, "profile_export_aiperf.json"))
	require.Equal(t, 150.0, summary["request_count"]["avg"])
	require.Equal(t, 0.0, summary["error_request_count"]["avg"], out)
	checkSummaryCSV(t, filepath.Join(dir, "profile_export_aiperf.csv"))
	checkRecords(t, filepath.Join(dir, "profile_export.jsonl"))
	checkInputs(t, filepath.Join(dir, "inputs.json"))
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	require.NoError(t, err)
	require.Equal(t, 3, strings.Count(string(html), "<svg"))
	for _, external := range []string{"<script", "src=", "href=", "<link"} {
		require.NotContains(t, string(html), external, "the report opens offline")
	}

	cmp := runBench(t, "bench", "compare", "--markdown", dir)
	require.Contains(t, cmp, "| metric | e2e |")
	require.Contains(t, cmp, "| requests | 150 |")
	d.requireIdle(t)
}

func runBench(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, duetBin, args...).CombinedOutput()
	require.NoError(t, err, string(out))
	return string(out)
}

func checkSummaryJSON(t *testing.T, path string) map[string]map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &top))
	metrics := map[string]map[string]any{}
	for tag, raw := range top {
		var m map[string]any
		if json.Unmarshal(raw, &m) == nil && m["unit"] != nil {
			metrics[tag] = m
		}
	}
	counts := map[string]float64{"time_to_first_token": 150, "time_to_first_token_first_turn": 30,
		"time_to_first_token_later_turns": 120, "request_latency": 150, "inter_token_latency": 150,
		"time_to_second_token": 150, "output_token_throughput_per_user": 150, "output_sequence_length": 150,
		"input_sequence_length": 150, "usage_prompt_cache_read_tokens": 150, "oracle_prefix_tokens": 150}
	for tag, n := range counts {
		m := metrics[tag]
		require.NotNil(t, m, tag)
		for _, k := range aiperfStats {
			require.Contains(t, m, k, "%s.%s", tag, k)
		}
		require.Equal(t, n, m["count"], tag)
		require.LessOrEqual(t, m["min"].(float64), m["p50"].(float64), tag)
		require.LessOrEqual(t, m["p50"].(float64), m["max"].(float64), tag)
	}
	require.Equal(t, "ms", metrics["time_to_first_token"]["unit"])
	require.Equal(t, 12.0, metrics["output_sequence_length"]["avg"], "ignore_eos and max_completion_tokens honoured")
	for _, tag := range []string{"request_throughput", "output_token_throughput", "request_count", "error_request_count",
		"benchmark_duration", "cache_hit_ratio", "oracle_hit_ratio", "routing_efficiency"} {
		require.Contains(t, metrics, tag)
		require.Contains(t, metrics[tag], "avg", tag)
	}
	require.Greater(t, metrics["cache_hit_ratio"]["avg"].(float64), 0.2, "later turns hit the KV cache")
	require.Greater(t, metrics["oracle_hit_ratio"]["avg"].(float64), metrics["cache_hit_ratio"]["avg"].(float64)/2)
	require.JSONEq(t, "[]", string(top["error_summary"]))
	require.JSONEq(t, "false", string(top["was_cancelled"]))
	// input_config is aiperf 0.12.0's BenchmarkConfig (models, endpoint,
	// datasets, phases); the command line is in run_info.
	var cfg struct {
		Models struct {
			Items []struct {
				Name string `json:"name"`
			} `json:"items"`
		} `json:"models"`
		Endpoint struct {
			Type      string            `json:"type"`
			Streaming bool              `json:"streaming"`
			Extra     map[string]any    `json:"extra"`
			Headers   map[string]string `json:"headers"`
		} `json:"endpoint"`
		Datasets []struct {
			Type    string `json:"type"`
			Entries int    `json:"entries"`
			Prompts struct {
				ISL struct {
					Mean float64 `json:"mean"`
				} `json:"isl"`
			} `json:"prompts"`
		} `json:"datasets"`
		Phases []struct {
			Name        string `json:"name"`
			Type        string `json:"type"`
			Requests    int    `json:"requests"`
			Sessions    int    `json:"sessions"`
			Concurrency int    `json:"concurrency"`
		} `json:"phases"`
	}
	require.NoError(t, json.Unmarshal(top["input_config"], &cfg))
	require.Len(t, cfg.Models.Items, 1)
	require.Equal(t, "meta-llama/Llama-3.1-8B-Instruct", cfg.Models.Items[0].Name)
	require.Empty(t, cfg.Endpoint.Type, "the default endpoint type is not written: aiperf leaves options that were not set out")
	require.True(t, cfg.Endpoint.Streaming)
	require.Equal(t, map[string]any{"ignore_eos": true}, cfg.Endpoint.Extra)
	require.Len(t, cfg.Datasets, 1)
	require.Equal(t, "synthetic", cfg.Datasets[0].Type)
	require.Equal(t, 30, cfg.Datasets[0].Entries)
	require.Equal(t, 60.0, cfg.Datasets[0].Prompts.ISL.Mean)
	require.Len(t, cfg.Phases, 2)
	require.Equal(t, "warmup", cfg.Phases[0].Name)
	require.Equal(t, 3, cfg.Phases[0].Requests)
	require.Equal(t, "profiling", cfg.Phases[1].Name)
	require.Equal(t, "concurrency", cfg.Phases[1].Type)
	require.Equal(t, 30, cfg.Phases[1].Sessions)
	require.Equal(t, 8, cfg.Phases[1].Concurrency)
	var runInfo struct {
		CLICommand string `json:"cli_command"`
		RandomSeed int    `json:"random_seed"`
	}
	require.NoError(t, json.Unmarshal(top["run_info"], &runInfo))
	require.Contains(t, runInfo.CLICommand, "--num-sessions 30")
	require.Equal(t, 5, runInfo.RandomSeed)
	for _, k := range []string{"start_time", "end_time"} {
		var s string
		require.NoError(t, json.Unmarshal(top[k], &s), k)
		_, err := time.ParseInLocation("2006-01-02T15:04:05.999999", s, time.Local) // no fraction when it is 0
		require.NoError(t, err, k)
	}
	var duet struct {
		Label string `json:"label"`
		Turns []struct {
			TurnIndex    int `json:"turn_index"`
			Requests     int `json:"requests"`
			CachedTokens int `json:"cached_tokens"`
		} `json:"turns"`
	}
	require.NoError(t, json.Unmarshal(top["duet"], &duet))
	require.Equal(t, "e2e", duet.Label)
	require.Len(t, duet.Turns, 5)
	for i, tu := range duet.Turns {
		require.Equal(t, i, tu.TurnIndex)
		require.Equal(t, 30, tu.Requests)
	}
	return metrics
}

func checkSummaryCSV(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	sections := strings.Split(string(b), "\r\n\r\n")
	require.Len(t, sections, 2, "two sections, CRLF lines as aiperf writes them")
	rows, err := csv.NewReader(strings.NewReader(sections[0])).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"Metric", "avg", "min", "max", "sum", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "std"}, rows[0])
	names := map[string]bool{}
	for _, r := range rows[1:] {
		require.Len(t, r, 15)
		names[r[0]] = true
	}
	for _, n := range []string{"Time to First Token (ms)", "Request Latency (ms)", "Inter Token Latency (ms)",
		"Output Sequence Length (tokens)", "Input Sequence Length (tokens)"} {
		require.True(t, names[n], n)
	}
	rows, err = csv.NewReader(strings.NewReader(sections[1])).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"Metric", "Value"}, rows[0])
	values := map[string]string{}
	for _, r := range rows[1:] {
		values[r[0]] = r[1]
	}
	require.Equal(t, "150.00", values["Request Count"], "every value with two decimals, as aiperf writes it")
	require.Equal(t, "0.00", values["Error Request Count"])
	require.Contains(t, values, "Request Throughput (requests/sec)")
	require.Contains(t, values, "Cache Hit Ratio (ratio)")
}

func checkRecords(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	turns := map[string][]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	n, warmup := 0, 0
	for sc.Scan() {
		var rec struct {
			Metadata struct {
				SessionNum     *int    `json:"session_num"`
				XRequestID     string  `json:"x_request_id"`
				XCorrelationID string  `json:"x_correlation_id"`
				ConversationID string  `json:"conversation_id"`
				TurnIndex      *int    `json:"turn_index"`
				Start          int64   `json:"request_start_ns"`
				Ack            int64   `json:"request_ack_ns"`
				End            int64   `json:"request_end_ns"`
				Phase          string  `json:"benchmark_phase"`
				WasCancelled   *bool   `json:"was_cancelled"`
				CancelTime     *int64  `json:"cancellation_time_ns"`
				WorkerID       *string `json:"worker_id"`
			} `json:"metadata"`
			Metrics map[string]struct {
				Value any    `json:"value"`
				Unit  string `json:"unit"`
			} `json:"metrics"`
			Error json.RawMessage `json:"error"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec))
		m := rec.Metadata
		require.NotNil(t, m.SessionNum)
		require.NotNil(t, m.TurnIndex)
		require.NotNil(t, m.WasCancelled)
		require.NotNil(t, m.WorkerID)
		require.NotEmpty(t, m.XRequestID)
		require.NotEmpty(t, m.XCorrelationID)
		require.NotEmpty(t, m.ConversationID)
		if m.Phase == "warmup" { // exported as aiperf exports them, told apart by the phase
			warmup++
			continue
		}
		require.Equal(t, "profiling", m.Phase)
		n++
		require.Greater(t, m.Start, int64(1e18), "epoch nanoseconds")
		require.LessOrEqual(t, m.Start, m.Ack)
		require.LessOrEqual(t, m.Ack, m.End)
		require.Nil(t, m.CancelTime)
		require.Empty(t, rec.Error, "no error key on success")
		for _, k := range []string{"time_to_first_token", "time_to_second_token", "request_latency", "inter_token_latency",
			"output_token_throughput_per_user", "output_sequence_length", "input_sequence_length",
			"usage_prompt_tokens", "usage_prompt_cache_read_tokens", "oracle_prefix_tokens"} {
			require.Contains(t, rec.Metrics, k)
		}
		require.Equal(t, "ms", rec.Metrics["time_to_first_token"].Unit)
		require.Equal(t, 12.0, rec.Metrics["output_sequence_length"].Value)
		turns[m.XCorrelationID] = append(turns[m.XCorrelationID], *m.TurnIndex)
	}
	require.NoError(t, sc.Err())
	require.Equal(t, 150, n)
	require.Equal(t, 3, warmup)
	require.Len(t, turns, 30, "one X-Correlation-ID per session")
	for id, ts := range turns {
		require.ElementsMatch(t, []int{0, 1, 2, 3, 4}, ts, id)
	}
}

func checkInputs(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var inputs struct {
		Data []struct {
			SessionID string `json:"session_id"`
			Payloads  []struct {
				Model     string            `json:"model"`
				Messages  []json.RawMessage `json:"messages"`
				Stream    bool              `json:"stream"`
				MaxTokens int               `json:"max_completion_tokens"`
				IgnoreEOS bool              `json:"ignore_eos"`
			} `json:"payloads"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(b, &inputs))
	require.Len(t, inputs.Data, 30)
	for _, s := range inputs.Data {
		require.NotEmpty(t, s.SessionID)
		require.Len(t, s.Payloads, 5)
		for _, p := range s.Payloads {
			require.Equal(t, "meta-llama/Llama-3.1-8B-Instruct", p.Model)
			require.Len(t, p.Messages, 2, "system + the turn's user message")
			require.True(t, p.Stream)
			require.Equal(t, 12, p.MaxTokens)
			require.True(t, p.IgnoreEOS)
		}
	}
}
