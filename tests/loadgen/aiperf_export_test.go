package loadgen

import (
	"encoding/json"
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
		"warm-up, duration, endpoint options": func(c *Config) {
			c.NumSessions, c.Duration, c.GracePeriod, c.WarmupRequestCount = 0, 50*time.Millisecond, 0, 2
			c.Headers = []Header{{"Authorization", "Bearer secret"}, {"X-Team", "a"}}
			c.APIKey, c.SessionHeader, c.LegacyMaxTokens = "sk-secret", "X-Session-ID", true
			c.ExtraInputs = []ExtraInput{{"ignore_eos", []byte("true")}}
			c.ISLStddev, c.OSLStddev, c.TurnsStddev, c.TurnDelayStddev, c.TurnDelayRatio = 2, 1, 0.5, 2, 0.5
			c.UserContextPromptLength, c.HashBlockSize, c.CustomEndpoint = 10, 64, "/v1/chat/completions"
		},
		"user-centric": func(c *Config) {
			c.UserCentricRate, c.NumUsers, c.TurnsMean, c.NumSessions, c.Concurrency = 100, 2, 2, 2, 0
		},
		"mooncake trace, fixed schedule": func(c *Config) {
			c.InputFile, c.DatasetType, c.NumSessions, c.Concurrency = "testdata/mooncake_trace.jsonl", DatasetMooncake, 0, 0
			c.WarmupRequestCount, c.HashBlockSize = 1, 16
		},
		"multi-turn file played once": func(c *Config) {
			c.InputFile, c.DatasetType, c.NumSessions = "testdata/multi_turn.jsonl", DatasetMultiTurn, 0
		},
		"no session header": func(c *Config) {
			c.SessionHeader, c.RequestCount, c.NumSessions = "none", 3, 0
		},
		"prefix prompt pool": func(c *Config) {
			c.PrefixPromptPoolSize, c.PrefixPromptLength, c.PrefixPromptLengthStddev, c.PrefixPromptZipf = 2, 30, 5, 1
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

// validInputConfig is an input_config aiperf 0.12.0's BenchmarkConfig
// accepts; the cases below break one thing each.
const validInputConfig = `{
  "models": {"items": [{"name": "m"}]},
  "endpoint": {"urls": ["http://localhost:8000"], "timeout": 600.0, "streaming": true},
  "datasets": [{"name": "main", "type": "synthetic", "entries": 4, "prompts": {"isl": {"mean": 550.0}}}],
  "phases": [
    {"name": "warmup", "kind": "warmup", "type": "concurrency", "exclude_from_results": true, "requests": 2, "concurrency": 1},
    {"name": "profiling", "kind": "profiling", "type": "poisson", "requests": 4, "concurrency": 2, "rate": 10.0}
  ]
}`

func TestSchemaRejectsWhatAiperfRejects(t *testing.T) {
	summary, err := loadSchema(filepath.Join(aiperfSchemas, "profile_export_aiperf.schema.json"))
	require.NoError(t, err)
	base := `{"schema_version":"1.4","aiperf_version":"x","benchmark_id":"b","run_info":{},"was_cancelled":false,"error_summary":[],"input_config":%s}`
	check := func(inputConfig string) error {
		doc, err := decodeNumbers([]byte(strings.Replace(base, "%s", inputConfig, 1)))
		require.NoError(t, err, inputConfig)
		return summary.validate(summary, doc, "$")
	}
	require.NoError(t, check(validInputConfig))
	for _, c := range []struct{ why, from, to, err string }{
		{"an unknown top-level key (extra='forbid')", `"models":`, `"cli_command": "duet bench", "models":`, "input_config: cli_command is not allowed"},
		{"the old UserConfig layout", `"models":`, `"loadgen": {"concurrency": 2}, "models":`, "input_config: loadgen is not allowed"},
		{"a camelCase alias (the exporter writes names)", `"models":`, `"unsafeOverride": true, "models":`, "unsafeOverride is not allowed"},
		{"an unknown endpoint key", `"streaming": true`, `"streaming": true, "model_names": ["m"]`, "endpoint: model_names is not allowed"},
		{"an unknown phase key", `"rate": 10.0`, `"rate": 10.0, "arrival_pattern": "poisson"`, "phases[1]: arrival_pattern is not allowed"},
		{"an unknown dataset key", `"entries": 4,`, `"entries": 4, "num": 4,`, "datasets[0]: num is not allowed"},
		{"an unknown key in a distribution", `{"mean": 550.0}`, `{"mean": 550.0, "block_size": 512}`, "isl: block_size is not allowed"},
		{"an input-only shorthand, never dumped", `"entries": 4,`, `"entries": 4, "isl": 550,`, "datasets[0]: isl is not allowed"},
		{"not aiperf's URL strategy", `"timeout"`, `"url_strategy": "turn_round_robin", "timeout"`, "turn_round_robin is not one of"},
		{"an unset option written as \"\"", `"streaming": true`, `"streaming": true, "path": ""`, `path: "" does not match`},
		{"a URL without a scheme", `http://localhost:8000`, `localhost:8000`, `"localhost:8000" does not match`},
		{"rate must be > 0", `"rate": 10.0`, `"rate": 0.0`, "rate: 0 is not above 0"},
		{"requests must be >= 1", `"requests": 4`, `"requests": 0`, "requests: 0 is below 1"},
		{"duration must be > 0", `"requests": 4`, `"duration": 0.0`, "duration: 0 is not above 0"},
		{"a phase needs a stop condition", `"requests": 4, `, ``, "sessions is required"},
		{"a rate phase needs a rate", `, "rate": 10.0`, ``, "rate is required"},
		{"a user-centric phase needs users", `"type": "poisson"`, `"type": "user_centric"`, "users is required"},
		{"an unknown phase type", `"type": "poisson"`, `"type": "concurrency_burst"`, "concurrency_burst is not poisson"},
		{"one dataset only", `"prompts": {"isl": {"mean": 550.0}}}`, `"prompts": {"isl": {"mean": 550.0}}}, {"name": "b", "type": "synthetic"}`, "more than 1 items"},
		{"a file dataset needs a path", `"type": "synthetic", "entries": 4, "prompts": {"isl": {"mean": 550.0}}`, `"type": "file", "format": "multi_turn"`, "path is required"},
		{"a profiling phase is required", `"name": "profiling", "kind": "profiling"`, `"name": "steady", "kind": "warmup"`, "phases: no item matches"},
		{"models are required", `"models": {"items": [{"name": "m"}]},`, ``, "models is required"},
	} {
		require.Contains(t, validInputConfig, c.from, c.why)
		require.ErrorContains(t, check(strings.Replace(validInputConfig, c.from, c.to, 1)), c.err, c.why)
	}
	require.Error(t, check(`{}`), "models, endpoint, datasets and phases are required")

	// The wrong keys are refused by additionalProperties: false, not by
	// something else: with BenchmarkConfig made permissive they pass.
	permissive, err := loadSchema(filepath.Join(aiperfSchemas, "profile_export_aiperf.schema.json"))
	require.NoError(t, err)
	permissive["$defs"].(map[string]any)["BenchmarkConfig"].(map[string]any)["additionalProperties"] = true
	doc, err := decodeNumbers([]byte(strings.Replace(base, "%s", strings.Replace(validInputConfig, `"models":`, `"loadgen": {}, "models":`, 1), 1)))
	require.NoError(t, err)
	require.NoError(t, permissive.validate(permissive, doc, "$"))
	require.Error(t, summary.validate(summary, doc, "$"))

	doc, err = decodeNumbers([]byte(`{"time_to_first_token":{"unit":"ms","avg":1.0,"count":2,"extra":1}}`))
	require.NoError(t, err)
	require.Error(t, jsonSchema(summary["$defs"].(map[string]any)["JsonMetricResult"].(map[string]any)).validate(summary, doc.(map[string]any)["time_to_first_token"], "$"))
}

// TestInputConfigLayout pins the mapping of duet bench's options to aiperf
// 0.12.0's BenchmarkConfig.
func TestInputConfigLayout(t *testing.T) {
	summary, err := loadSchema(filepath.Join(aiperfSchemas, "profile_export_aiperf.schema.json"))
	require.NoError(t, err)
	benchmarkConfig := jsonSchema(summary["$defs"].(map[string]any)["BenchmarkConfig"].(map[string]any))
	base := func() Config {
		c := Defaults()
		c.Model = "m"
		return c
	}
	for _, c := range []struct {
		name   string
		cfg    func(*Config)
		played int
		want   string
	}{
		{"defaults", func(*Config) {}, 0, `{
			"models": {"items": [{"name": "m"}]},
			"endpoint": {"urls": ["http://localhost:8000"], "timeout": 600.0},
			"datasets": [{"name": "main", "type": "synthetic", "entries": 10, "prompts": {"isl": {"mean": 550.0}}}],
			"phases": [{"name": "profiling", "kind": "profiling", "type": "concurrency", "requests": 10, "concurrency": 1}]}`},
		{"synthetic multi-turn, warm-up, endpoint options", func(c *Config) {
			c.URLs = []string{"user:pw@gpu-0:8000", "http://gpu-1:8000/"}
			c.EndpointType, c.CustomEndpoint, c.Streaming, c.LegacyMaxTokens = EndpointCompletions, "/v2/complete", true, true
			c.APIKey, c.SessionHeader, c.RequestTimeout = "sk-1", "X-Session-ID", 30*time.Second
			c.Headers = []Header{{"Authorization", "Basic xyz"}, {"X-Team", "a"}, {"x-team", "b"}}
			c.ExtraInputs = []ExtraInput{{"ignore_eos", []byte("true")}, {"top_k", []byte("5")}, {"ignore_eos", []byte("false")}}
			c.NumSessions, c.TurnsMean, c.TurnsStddev, c.TurnDelayMean, c.TurnDelayStddev, c.TurnDelayRatio = 8, 3, 1, 500, 100, 0.5
			c.ISL, c.ISLStddev, c.OSL, c.OSLStddev, c.HashBlockSize = 200, 20, 50, 5, 64
			c.SharedSystemPromptLength, c.UserContextPromptLength = 1000, 300
			c.Concurrency, c.WarmupRequestCount = 4, 6
		}, 0, `{
			"models": {"items": [{"name": "m"}]},
			"endpoint": {"urls": ["http://<redacted>@gpu-0:8000", "http://gpu-1:8000"], "type": "completions", "path": "/v2/complete",
				"api_key": "<redacted>", "timeout": 30.0, "streaming": true, "use_legacy_max_tokens": true,
				"headers": {"Authorization": "<redacted>", "x-team": "b"}, "extra": {"ignore_eos": false, "top_k": 5},
				"session_header": "X-Session-ID"},
			"datasets": [{"name": "main", "type": "synthetic", "entries": 8,
				"prompts": {"isl": {"mean": 200.0, "stddev": 20.0}, "osl": {"mean": 50.0, "stddev": 5.0}, "block_size": 64},
				"prefix_prompts": {"shared_system_length": 1000, "user_context_length": 300},
				"turns": {"mean": 3.0, "stddev": 1.0}, "turn_delay": {"mean": 500.0, "stddev": 100.0}, "turn_delay_ratio": 0.5}],
			"phases": [
				{"name": "warmup", "kind": "warmup", "type": "concurrency", "exclude_from_results": true, "requests": 6, "concurrency": 4},
				{"name": "profiling", "kind": "profiling", "type": "concurrency", "sessions": 8, "concurrency": 4}]}`},
		{"prefix prompt pool (document QA)", func(c *Config) {
			c.NumSessions, c.SessionHeader = 100, "none"
			c.PrefixPromptPoolSize, c.PrefixPromptLength, c.PrefixPromptLengthStddev, c.PrefixPromptZipf = 10, 25000, 8000, 0.8
		}, 0, `{
			"models": {"items": [{"name": "m"}]},
			"endpoint": {"urls": ["http://localhost:8000"], "timeout": 600.0},
			"datasets": [{"name": "main", "type": "synthetic", "entries": 100, "prompts": {"isl": {"mean": 550.0}},
				"prefix_prompts": {"pool_size": 10, "length": 25000}}],
			"phases": [{"name": "profiling", "kind": "profiling", "type": "concurrency", "sessions": 100, "concurrency": 1}]}`},
		{"request rate, duration", func(c *Config) {
			c.RequestRate, c.ArrivalPattern, c.Concurrency, c.Duration, c.GracePeriod = 2.5, ArrivalConstant, 16, time.Minute, 0
			c.RequestTimeout = 6 * time.Hour
		}, 0, `{
			"models": {"items": [{"name": "m"}]},
			"endpoint": {"urls": ["http://localhost:8000"]},
			"datasets": [{"name": "main", "type": "synthetic", "prompts": {"isl": {"mean": 550.0}}}],
			"phases": [{"name": "profiling", "kind": "profiling", "type": "constant", "duration": 60.0, "concurrency": 16,
				"grace_period": 0.0, "rate": 2.5}]}`},
		{"user-centric", func(c *Config) {
			c.UserCentricRate, c.NumUsers, c.TurnsMean, c.RequestCount = 4, 3, 2, 30
		}, 0, `{
			"models": {"items": [{"name": "m"}]},
			"endpoint": {"urls": ["http://localhost:8000"], "timeout": 600.0},
			"datasets": [{"name": "main", "type": "synthetic", "entries": 30, "prompts": {"isl": {"mean": 550.0}}, "turns": {"mean": 2.0}}],
			"phases": [{"name": "profiling", "kind": "profiling", "type": "user_centric", "requests": 30, "rate": 4.0, "users": 3}]}`},
		{"mooncake trace on its schedule", func(c *Config) {
			c.InputFile, c.DatasetType, c.FixedSchedule, c.HashBlockSize, c.Concurrency = "trace.jsonl", DatasetMooncake, true, 16, 8
			c.ISL, c.WarmupRequestCount = 100, 2 // the warm-up's synthetic sessions: under "duet"
		}, 5, `{
			"models": {"items": [{"name": "m"}]},
			"endpoint": {"urls": ["http://localhost:8000"], "timeout": 600.0},
			"datasets": [{"name": "main", "type": "file", "path": "trace.jsonl", "format": "mooncake_trace", "block_size": 16}],
			"phases": [
				{"name": "warmup", "kind": "warmup", "type": "concurrency", "exclude_from_results": true, "requests": 2, "concurrency": 8},
				{"name": "profiling", "kind": "profiling", "type": "fixed_schedule", "concurrency": 8, "auto_offset": false}]}`},
		{"multi-turn file played once", func(c *Config) {
			c.InputFile, c.DatasetType, c.FixedScheduleAutoOffset = "chats.jsonl", DatasetMultiTurn, false
		}, 12, `{
			"models": {"items": [{"name": "m"}]},
			"endpoint": {"urls": ["http://localhost:8000"], "timeout": 600.0},
			"datasets": [{"name": "main", "type": "file", "path": "chats.jsonl", "format": "multi_turn"}],
			"phases": [{"name": "profiling", "kind": "profiling", "type": "concurrency", "sessions": 12, "concurrency": 1}]}`},
		{"first sessions of a file, on its schedule, offset", func(c *Config) {
			c.InputFile, c.DatasetType, c.FixedSchedule, c.FixedScheduleAutoOffset, c.NumSessions = "chats.jsonl", DatasetSingleTurn, true, true, 3
		}, 3, `{
			"models": {"items": [{"name": "m"}]},
			"endpoint": {"urls": ["http://localhost:8000"], "timeout": 600.0},
			"datasets": [{"name": "main", "type": "file", "path": "chats.jsonl", "format": "single_turn", "entries": 3}],
			"phases": [{"name": "profiling", "kind": "profiling", "type": "fixed_schedule", "sessions": 3, "auto_offset": true}]}`},
	} {
		cfg := base()
		c.cfg(&cfg)
		require.NoError(t, cfg.Validate(), c.name)
		got := inputConfig(cfg, c.played)
		require.JSONEq(t, c.want, string(got), c.name)
		doc, err := decodeNumbers(got)
		require.NoError(t, err)
		require.NoError(t, benchmarkConfig.validate(summary, doc, "$"), c.name)
	}
}

// TestDuetSectionKeepsWhatInputConfigCannot checks that the options aiperf
// 0.12.0's input_config has no field for are recorded under "duet".
func TestDuetSectionKeepsWhatInputConfigCannot(t *testing.T) {
	c := Defaults()
	c.Model, c.URLStrategy, c.SessionHeader = "m", URLTurnRoundRobin, "none"
	c.InputFile, c.DatasetType, c.WarmupRequestCount, c.TurnsMean, c.TurnDelayRatio = "x.jsonl", DatasetMultiTurn, 3, 2, 0.5
	var duet map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(duetSection(c.withDefaults(), &Summary{}, RunInfo{Label: "l"}), &duet))
	require.JSONEq(t, `"turn_round_robin"`, string(duet["url_strategy"]))
	require.JSONEq(t, `"none"`, string(duet["session_header"]))
	require.JSONEq(t, `false`, string(duet["session_affinity_header"]))
	require.JSONEq(t, `{"name": "warmup", "type": "synthetic", "prompts": {"isl": {"mean": 550.0}},
		"turns": {"mean": 2.0}, "turn_delay_ratio": 0.5}`, string(duet["warmup_dataset"]))
	ic := string(inputConfig(c, 1))
	for _, lost := range []string{"turn_round_robin", `"none"`, "url_strategy", "session_header", "turn_delay_ratio"} {
		require.NotContains(t, ic, lost)
	}

	c = Defaults()
	c.Model, c.NoAffinityHeader = "m", true
	duet = nil
	require.NoError(t, json.Unmarshal(duetSection(c, &Summary{}, RunInfo{}), &duet))
	require.JSONEq(t, `"X-Correlation-ID"`, string(duet["session_header"]))
	require.JSONEq(t, `false`, string(duet["session_affinity_header"]))
	require.NotContains(t, duet, "warmup_dataset", "a synthetic run warms up on sessions shaped like its dataset")
	require.NotContains(t, duet, "prefix_prompt_length_stddev")

	c.PrefixPromptPoolSize, c.PrefixPromptLength, c.PrefixPromptLengthStddev, c.PrefixPromptZipf = 4, 100, 20, 1.5
	duet = nil
	require.NoError(t, json.Unmarshal(duetSection(c, &Summary{}, RunInfo{}), &duet))
	require.JSONEq(t, `20.0`, string(duet["prefix_prompt_length_stddev"]))
	require.JSONEq(t, `1.5`, string(duet["prefix_prompt_zipf"]))
	require.NotContains(t, string(inputConfig(c, 1)), "zipf")
}
