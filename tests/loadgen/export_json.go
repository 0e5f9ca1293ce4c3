package loadgen

import (
	"bufio"
	"bytes"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The layout of profile_export_aiperf.json follows aiperf 0.12.0's
// JsonExportData (src/aiperf/common/models/export_models.py), dumped as it
// dumps it (exclude_unset, exclude_none): schema 1.4; record metrics with
// unit, avg, p1..p99, min, max, std, count and sum, single values with unit
// and avg; the declared metric fields first, then the run's configuration
// and run_info, the error summary and the times, then the other metrics.
// input_config keeps the UserConfig layout of aiperf 0.8 and earlier, which
// aiperf 0.12's tools still read; options that were not set are left out.
// What aiperf does not export goes under "duet".

// aiperfSchemaVersion is JsonExportData.SCHEMA_VERSION in aiperf 0.12.0.
const aiperfSchemaVersion = "1.4"

// declaredMetrics are JsonExportData's metric fields, in declaration order.
var declaredMetrics = []string{"request_throughput", "request_latency", "request_count", "time_to_first_token",
	"time_to_second_token", "inter_token_latency", "output_token_throughput", "output_token_throughput_per_user",
	"output_sequence_length", "input_sequence_length", "goodput", "good_request_count", "output_token_count",
	"reasoning_token_count", "min_request_timestamp", "max_response_timestamp", "inter_chunk_latency",
	"total_output_tokens", "total_reasoning_tokens", "benchmark_duration", "total_isl", "total_osl",
	"error_request_count", "error_isl", "total_error_isl"}

// finite maps NaN and infinities to JSON null, as aiperf does, and writes
// other values as Python writes floats (always with a fraction or an
// exponent: 64.0, 1.5e+18).
func finite(v float64) json.RawMessage {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return json.RawMessage("null")
	}
	if a := math.Abs(v); a != 0 && (a < 1e-4 || a >= 1e16) {
		return json.RawMessage(strconv.FormatFloat(v, 'e', -1, 64))
	}
	out := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(out, ".") {
		out += ".0"
	}
	return json.RawMessage(out)
}

// metricJSON is one metric: {unit, avg, p1..p99, min, max, std, count, sum}
// for a distribution, {unit, avg} for a single value.
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
	fields = append(fields, jsonField{"count", mustJSON(m.Stats.Count)}, jsonField{"sum", finite(m.Stats.Sum)})
	return writeObject(fields)
}

func statsJSON(s *Stats) json.RawMessage {
	if s == nil {
		return json.RawMessage("null")
	}
	return metricJSON(&Metric{Unit: "ms", Stats: s})
}

// aiperfTime formats a time as aiperf does (Python's naive isoformat, local
// time, without a fraction when the microseconds are 0); ok is false for
// the zero time (left out).
func aiperfTime(t time.Time) (json.RawMessage, bool) {
	if t.IsZero() {
		return nil, false
	}
	t = t.Local()
	layout := "2006-01-02T15:04:05"
	if t.Nanosecond()/1000 != 0 {
		layout += ".000000"
	}
	return mustJSON(t.Format(layout)), true
}

func writeSummaryJSON(w *bufio.Writer, res *Result, sum *Summary, info RunInfo) error {
	id := benchmarkID()
	fields := []jsonField{{"schema_version", mustJSON(aiperfSchemaVersion)}, {"aiperf_version", mustJSON("duet " + info.Version)},
		{"benchmark_id", mustJSON(id)}}
	byTag := map[string]*Metric{}
	for i := range sum.Metrics {
		byTag[sum.Metrics[i].Tag] = &sum.Metrics[i]
	}
	for _, tag := range declaredMetrics {
		if m := byTag[tag]; m != nil {
			fields = append(fields, jsonField{tag, metricJSON(m)})
		}
	}
	errs := sum.Errors
	if errs == nil {
		errs = []ErrorCount{}
	}
	fields = append(fields,
		jsonField{"input_config", inputConfig(res.Config, info, id)},
		jsonField{"run_info", runInfo(res.Config, info, id)},
		jsonField{"was_cancelled", mustJSON(res.Cancelled)},
		jsonField{"error_summary", mustJSON(errs)},
	)
	if t, ok := aiperfTime(sum.Start); ok {
		fields = append(fields, jsonField{"start_time", t})
	}
	if t, ok := aiperfTime(sum.End); ok {
		fields = append(fields, jsonField{"end_time", t})
	}
	for i := range sum.Metrics {
		if m := &sum.Metrics[i]; !slices.Contains(declaredMetrics, m.Tag) {
			fields = append(fields, jsonField{m.Tag, metricJSON(m)})
		}
	}
	fields = append(fields, jsonField{"duet", duetSection(res.Config, sum, info)})
	var out bytes.Buffer
	if err := json.Indent(&out, writeObject(fields), "", "  "); err != nil {
		return err
	}
	_, err := w.Write(out.Bytes()) // aiperf writes no newline at the end
	return err
}

// benchmarkID is a run's id as aiperf 0.12 makes it: 12 hex digits.
func benchmarkID() string {
	var b [6]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// runInfo is aiperf 0.12's run_info for a run that is not part of a sweep.
func runInfo(c Config, info RunInfo, id string) json.RawMessage {
	fields := []jsonField{{"benchmark_id", mustJSON(id)}}
	if c.SeedSet {
		fields = append(fields, jsonField{"random_seed", mustJSON(c.Seed)})
	}
	if info.Label != "" {
		fields = append(fields, jsonField{"run_label", mustJSON(info.Label)})
	}
	fields = append(fields, jsonField{"variation_label", mustJSON("base")}, jsonField{"variation_index", mustJSON(0)},
		jsonField{"variation_values", json.RawMessage("{}")})
	if info.CLICommand != "" {
		fields = append(fields, jsonField{"cli_command", mustJSON(info.CLICommand)})
	}
	return writeObject(fields)
}

// section collects the set options of one input_config section.
type section []jsonField

// set adds key when set is true.
func (s *section) set(key string, v any, set bool) {
	if set {
		*s = append(*s, jsonField{key, mustJSON(v)})
	}
}

// add adds a nested section when it holds anything.
func (s *section) add(key string, sub section) {
	if len(sub) > 0 {
		*s = append(*s, jsonField{key, writeObject(sub)})
	}
}

// inputConfig is aiperf's input_config in the UserConfig layout (aiperf
// 0.8 and earlier, common/config/*.py): only the options the run set (those
// that differ from duet bench's defaults), never "" or 0 for an unset one.
func inputConfig(c Config, info RunInfo, id string) json.RawMessage {
	d := Defaults()
	var endpoint, input, prompt, isl, osl, prefix, conv, turn, delay, loadgen section
	endpoint.set("model_names", []string{c.Model}, true)
	endpoint.set("type", c.EndpointType, c.EndpointType != d.EndpointType)
	endpoint.set("custom_endpoint", c.CustomEndpoint, c.CustomEndpoint != "")
	endpoint.set("streaming", c.Streaming, c.Streaming)
	endpoint.set("urls", c.URLs, true)
	// url_selection_strategy: aiperf's only one, round_robin, is the default;
	// duet's turn_round_robin is not aiperf's (in "duet" instead).
	endpoint.set("timeout_seconds", c.RequestTimeout.Seconds(), c.RequestTimeout != d.RequestTimeout)
	endpoint.set("use_legacy_max_tokens", true, c.LegacyMaxTokens)
	extra := make([][2]json.RawMessage, len(c.ExtraInputs))
	for i, e := range c.ExtraInputs {
		extra[i] = [2]json.RawMessage{mustJSON(e.Key), e.Value}
	}
	input.set("extra", extra, len(extra) > 0)
	input.set("session_header", c.SessionHeader, c.SessionHeader != d.SessionHeader)
	input.set("file", c.InputFile, c.InputFile != "")
	input.set("custom_dataset_type", c.DatasetType, c.DatasetType != "")
	input.set("fixed_schedule", true, c.FixedSchedule)
	input.set("fixed_schedule_auto_offset", true, c.FixedScheduleAutoOffset)
	input.set("random_seed", c.Seed, c.SeedSet)
	isl.set("mean", c.ISL, c.ISL != d.ISL)
	isl.set("stddev", c.ISLStddev, c.ISLStddev != 0)
	isl.set("block_size", c.HashBlockSize, c.HashBlockSize != d.HashBlockSize)
	osl.set("mean", c.OSL, c.OSL != 0)
	osl.set("stddev", c.OSLStddev, c.OSLStddev != 0)
	prefix.set("shared_system_prompt_length", c.SharedSystemPromptLength, c.SharedSystemPromptLength > 0)
	prefix.set("user_context_prompt_length", c.UserContextPromptLength, c.UserContextPromptLength > 0)
	prompt.add("input_tokens", isl)
	prompt.add("output_tokens", osl)
	prompt.add("prefix_prompt", prefix)
	input.add("prompt", prompt)
	conv.set("num", c.NumSessions, c.NumSessions > 0)
	turn.set("mean", c.TurnsMean, c.TurnsMean != d.TurnsMean)
	turn.set("stddev", c.TurnsStddev, c.TurnsStddev != 0)
	delay.set("mean", c.TurnDelayMean, c.TurnDelayMean != 0)
	delay.set("stddev", c.TurnDelayStddev, c.TurnDelayStddev != 0)
	delay.set("ratio", c.TurnDelayRatio, c.TurnDelayRatio != d.TurnDelayRatio)
	turn.add("delay", delay)
	conv.add("turn", turn)
	input.add("conversation", conv)
	loadgen.set("concurrency", c.Concurrency, c.Concurrency > 0)
	loadgen.set("request_rate", c.RequestRate, c.RequestRate > 0)
	loadgen.set("arrival_pattern", c.aiperfArrival(), true)
	loadgen.set("request_count", c.RequestCount, c.RequestCount > 0)
	loadgen.set("warmup_request_count", c.WarmupRequestCount, c.WarmupRequestCount > 0)
	loadgen.set("benchmark_duration", c.Duration.Seconds(), c.Duration > 0)
	loadgen.set("benchmark_grace_period", c.GracePeriod.Seconds(), c.Duration > 0 && c.GracePeriod != d.GracePeriod)
	loadgen.set("user_centric_rate", c.UserCentricRate, c.UserCentricRate > 0)
	loadgen.set("num_users", c.NumUsers, c.NumUsers > 0)
	var top section
	top.add("endpoint", endpoint)
	top.add("input", input)
	top.add("loadgen", loadgen)
	top.set("cli_command", info.CLICommand, info.CLICommand != "")
	top.set("benchmark_id", id, true)
	return writeObject(top)
}

// aiperfArrival is loadgen.arrival_pattern as aiperf's validators fill it:
// concurrency_burst for a concurrency run, the rate's pattern otherwise.
func (c Config) aiperfArrival() string {
	if c.RequestRate > 0 {
		return c.ArrivalPattern
	}
	return "concurrency_burst"
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
		{"url_strategy", mustJSON(c.URLStrategy)},
		{"turns", mustJSON(turns)},
	})
}
