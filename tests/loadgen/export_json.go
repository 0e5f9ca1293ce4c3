package loadgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"time"
)

// finite maps NaN and infinities to JSON null, as aiperf does.
func finite(v float64) json.RawMessage {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return json.RawMessage("null")
	}
	return mustJSON(v)
}

// metricJSON is one metric of profile_export_aiperf.json: {unit, avg, min,
// max, p1..p99, std, count} for a distribution, {unit, avg} for a single
// value.
func metricJSON(m *Metric) json.RawMessage {
	fields := []jsonField{{"unit", mustJSON(m.Unit)}}
	if m.Value != nil {
		fields = append(fields, jsonField{"avg", finite(*m.Value)})
		return writeObject(fields)
	}
	for _, name := range StatNames {
		v, _ := m.Stats.Get(name)
		fields = append(fields, jsonField{name, finite(v)})
	}
	fields = append(fields, jsonField{"count", mustJSON(m.Stats.Count)})
	return writeObject(fields)
}

func statsJSON(s *Stats) json.RawMessage {
	if s == nil {
		return json.RawMessage("null")
	}
	return metricJSON(&Metric{Unit: "ms", Stats: s})
}

// aiperfTime formats a time as aiperf does (Python's naive isoformat).
func aiperfTime(t time.Time) json.RawMessage {
	if t.IsZero() {
		return json.RawMessage("null")
	}
	return mustJSON(t.Local().Format("2006-01-02T15:04:05.000000"))
}

func writeSummaryJSON(w *bufio.Writer, res *Result, sum *Summary, info RunInfo) error {
	var fields []jsonField
	for i := range sum.Metrics {
		fields = append(fields, jsonField{sum.Metrics[i].Tag, metricJSON(&sum.Metrics[i])})
	}
	errs := sum.Errors
	if errs == nil {
		errs = []ErrorCount{}
	}
	fields = append(fields,
		jsonField{"error_summary", mustJSON(errs)},
		jsonField{"was_cancelled", mustJSON(res.Cancelled)},
		jsonField{"input_config", inputConfig(res.Config, info)},
		jsonField{"start_time", aiperfTime(sum.Start)},
		jsonField{"end_time", aiperfTime(sum.End)},
		jsonField{"duet", duetSection(res.Config, sum, info)},
	)
	var out bytes.Buffer
	if err := json.Indent(&out, writeObject(fields), "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// inputConfig mirrors aiperf's input_config section.
func inputConfig(c Config, info RunInfo) json.RawMessage {
	type stat struct {
		Mean   float64 `json:"mean"`
		Stddev float64 `json:"stddev"`
	}
	extra := make([][2]json.RawMessage, len(c.ExtraInputs))
	for i, e := range c.ExtraInputs {
		extra[i] = [2]json.RawMessage{mustJSON(e.Key), e.Value}
	}
	v := map[string]any{
		"endpoint": map[string]any{
			"model_names": []string{c.Model}, "type": c.EndpointType, "custom_endpoint": c.endpointPath(),
			"streaming": c.Streaming, "urls": c.URLs, "url_selection_strategy": c.URLStrategy,
			"session_header": c.SessionHeader,
		},
		"input": map[string]any{
			"extra": extra, "random_seed": c.Seed, "file": c.InputFile, "custom_dataset_type": c.DatasetType,
			"fixed_schedule": c.FixedSchedule,
			"prompt": map[string]any{
				"input_tokens":  stat{float64(c.ISL), c.ISLStddev},
				"output_tokens": stat{float64(c.OSL), c.OSLStddev},
			},
			"conversation": map[string]any{
				"num": c.NumSessions, "turn": stat{c.TurnsMean, c.TurnsStddev},
				"turn_delay": stat{c.TurnDelayMean, c.TurnDelayStddev}, "turn_delay_ratio": c.TurnDelayRatio,
			},
			"shared_system_prompt_length": c.SharedSystemPromptLength,
			"user_context_prompt_length":  c.UserContextPromptLength,
		},
		"loadgen": map[string]any{
			"concurrency": c.Concurrency, "request_rate": c.RequestRate, "arrival_pattern": c.mode(),
			"request_count": c.RequestCount, "warmup_request_count": c.WarmupRequestCount,
			"benchmark_duration": c.Duration.Seconds(), "user_centric_rate": c.UserCentricRate, "num_users": c.NumUsers,
		},
		"cli_command": info.CLICommand,
	}
	return mustJSON(v)
}

// duetSection holds what aiperf does not export: the run's label, the
// oracle's block size and the per-turn breakdown.
func duetSection(c Config, sum *Summary, info RunInfo) json.RawMessage {
	turns := make([]json.RawMessage, len(sum.Turns))
	for i, t := range sum.Turns {
		fields := []jsonField{
			{"turn_index", mustJSON(t.TurnIndex)}, {"requests", mustJSON(t.Requests)}, {"errors", mustJSON(t.Errors)},
			{"time_to_first_token", statsJSON(t.TTFT)},
			{"prompt_tokens", mustJSON(t.PromptTokens)}, {"cached_tokens", mustJSON(t.CachedTokens)},
			{"client_prompt_tokens", mustJSON(t.ClientPromptTokens)}, {"oracle_tokens", mustJSON(t.OracleTokens)},
		}
		if v, ok := t.HitRatio(); ok {
			fields = append(fields, jsonField{"cache_hit_ratio", finite(v)})
		}
		if v, ok := t.OracleRatio(); ok {
			fields = append(fields, jsonField{"oracle_hit_ratio", finite(v)})
		}
		turns[i] = writeObject(fields)
	}
	return writeObject([]jsonField{
		{"label", mustJSON(info.Label)}, {"version", mustJSON(info.Version)},
		{"oracle_block_size", mustJSON(c.OracleBlockSize)}, {"load_mode", mustJSON(c.mode())},
		{"turns", mustJSON(turns)},
	})
}
