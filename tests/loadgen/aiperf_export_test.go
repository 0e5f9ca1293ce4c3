package loadgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const aiperfSchemas = "testdata/aiperf-0.12.0"

// requireAiperfExports validates a run's profile_export_aiperf.json and
// every line of its profile_export.jsonl against the schemas derived from
// aiperf 0.12.0's export models.
func requireAiperfExports(t *testing.T, dir string) {
	t.Helper()
	summary, err := loadSchema(filepath.Join(aiperfSchemas, "profile_export_aiperf.schema.json"))
	require.NoError(t, err)
	record, err := loadSchema(filepath.Join(aiperfSchemas, "profile_export_record.schema.json"))
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(dir, FileSummaryJSON))
	require.NoError(t, err)
	doc, err := decodeNumbers(raw)
	require.NoError(t, err)
	require.NoError(t, summary.validate(summary, doc, "$"))
	for i, line := range readLines(t, filepath.Join(dir, FileRecords)) {
		rec, err := decodeNumbers([]byte(line))
		require.NoError(t, err)
		require.NoError(t, record.validate(record, rec, "line "+string(rune('0'+i%10))))
	}
}

func TestExportsValidateAgainstAiperfModels(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"defaults": func(*Config) {},
		"multi-turn set": func(c *Config) {
			c.NumSessions, c.TurnsMean, c.Concurrency, c.TurnDelayMean, c.SharedSystemPromptLength = 3, 2, 3, 1, 50
		},
		"rate": func(c *Config) {
			c.RequestRate, c.ArrivalPattern, c.NumSessions, c.RequestCount, c.Concurrency = 200, ArrivalConstant, 0, 4, 2
		},
		"turn_round_robin": func(c *Config) {
			c.URLStrategy = URLTurnRoundRobin
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeEngine(2)
			cfg := testConfig()
			cfg.NumSessions, cfg.Concurrency = 2, 2
			mutate(&cfg)
			res := runFake(t, f, cfg)
			dir := filepath.Join(t.TempDir(), "run")
			_, err := WriteArtifacts(dir, res, SummarizeRecords(res.Records), RunInfo{CLICommand: "duet bench -m m", Version: "test", Label: "x"})
			require.NoError(t, err)
			requireAiperfExports(t, dir)
		})
	}
}

func TestExportsWithErrorsValidate(t *testing.T) {
	status := 503
	res := &Result{Config: testConfig(), Records: []Record{
		{Phase: PhaseProfiling, SessionNum: 0, RequestID: "a", Start: time.Unix(100, 0), End: time.Unix(101, 5000),
			Err: &ErrorDetails{Code: &status, Type: "Service Unavailable", Message: `{"error":{}}`}},
		{Phase: PhaseWarmup, SessionNum: 1, Start: time.Unix(99, 0), End: time.Unix(99, 7000), Cancelled: true,
			Err: &ErrorDetails{Type: ErrCancelled, Message: "cancelled"}},
	}}
	dir := filepath.Join(t.TempDir(), "run")
	_, err := WriteArtifacts(dir, res, SummarizeRecords(res.Records), RunInfo{Version: "test"})
	require.NoError(t, err)
	requireAiperfExports(t, dir)
	lines := readLines(t, filepath.Join(dir, FileRecords))
	require.Len(t, lines, 2, "warm-up records are written too, as aiperf writes them")
	require.Contains(t, lines[0], `"error":{"code":503,"type":"Service Unavailable"`)
}

func TestSchemaRejectsWhatAiperfRejects(t *testing.T) {
	summary, err := loadSchema(filepath.Join(aiperfSchemas, "profile_export_aiperf.schema.json"))
	require.NoError(t, err)
	base := `{"schema_version":"1.4","aiperf_version":"x","benchmark_id":"b","run_info":{},"was_cancelled":false,"error_summary":[],"input_config":%s}`
	for bad, why := range map[string]string{
		`{"input":{"custom_dataset_type":""}}`:                                           "an unset option written as \"\"",
		`{"loadgen":{"request_rate":0}}`:                                                 "request_rate must be > 0",
		`{"loadgen":{"request_count":0}}`:                                                "request_count must be >= 1",
		`{"loadgen":{"benchmark_duration":0}}`:                                           "benchmark_duration must be > 0",
		`{"input":{"conversation":{"turn_delay":{}}}}`:                                   "duet's old nesting",
		`{"endpoint":{"model_names":["m"],"url_selection_strategy":"turn_round_robin"}}`: "not aiperf's strategy",
	} {
		doc, err := decodeNumbers([]byte(strings.Replace(base, "%s", bad, 1)))
		require.NoError(t, err)
		require.Error(t, summary.validate(summary, doc, "$"), why)
	}
	doc, err := decodeNumbers([]byte(strings.Replace(base, "%s", `{}`, 1)))
	require.NoError(t, err)
	require.NoError(t, summary.validate(summary, doc, "$"))
	doc, err = decodeNumbers([]byte(`{"time_to_first_token":{"unit":"ms","avg":1.0,"count":2,"extra":1}}`))
	require.NoError(t, err)
	require.Error(t, jsonSchema(summary["$defs"].(map[string]any)["JsonMetricResult"].(map[string]any)).validate(summary, doc.(map[string]any)["time_to_first_token"], "$"))
}
