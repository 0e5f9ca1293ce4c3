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
// input_config is 0.12's BenchmarkConfig (models, endpoint, datasets,
// phases; see inputConfig), holding only what the run set. What aiperf does
// not export, and the options 0.12's input_config has no field for, go
// under "duet". The aiperf source read is commit c2f5e9d4 (pyproject
// version 0.12.0).

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
		jsonField{"input_config", inputConfig(res.Config, len(res.Sessions))},
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

// section collects the set options of one input_config object, in the
// order aiperf's model declares them.
type section []jsonField

// set adds key when set is true. Strings are written as Python writes
// them, without escaping <, > and & ("<redacted>").
func (s *section) set(key string, v any, set bool) {
	if !set {
		return
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	*s = append(*s, jsonField{key, bytes.TrimSuffix(b.Bytes(), []byte("\n"))})
}

// add adds a nested object when it holds anything.
func (s *section) add(key string, sub section) {
	if len(sub) > 0 {
		*s = append(*s, jsonField{key, writeObject(sub)})
	}
}

// aiperfTimeout is the request timeout aiperf 0.12.0 assumes when
// endpoint.timeout is absent (EndpointDefaults.TIMEOUT in
// src/aiperf/config/endpoint.py). duet's default is the 600 s of aiperf 0.8,
// so duet writes the timeout whenever it differs from 6 hours.
const aiperfTimeout = 6 * time.Hour

// inputConfig is input_config in the layout of aiperf 0.12.0's
// BenchmarkConfig (src/aiperf/config/config.py; its sections in
// models.py, endpoint.py, dataset/config.py, dataset/content.py,
// distributions.py and phases.py of the same directory). Every one of those
// models refuses keys it does not declare (extra="forbid"), and aiperf's
// JSON exporter (src/aiperf/exporters/metrics_json_exporter.py) dumps the
// config by field name (not by its camelCase aliases) with exclude_unset and
// exclude_none, so a field appears only when it was given a value. duet
// writes what its run set, shaped as aiperf 0.12's own CLI converter
// (src/aiperf/config/flags/_converter_*.py) shapes the same aiperf flags:
//
//   - models: {"items": [{"name": --model}]};
//   - endpoint: urls (user info redacted), type unless chat, path
//     (--endpoint), api_key (redacted), timeout, streaming,
//     use_legacy_max_tokens, headers (-H, credential values redacted),
//     extra (--extra-inputs) and session_header;
//   - datasets: one entry named "main": a file dataset (path, format,
//     entries, block_size) for --input-file, otherwise a synthetic one
//     (entries, prompts.isl/osl/block_size, prefix_prompts, turns,
//     turn_delay, turn_delay_ratio);
//   - phases: "warmup" for --warmup-request-count, then "profiling" typed
//     concurrency, poisson, constant, user_centric or fixed_schedule, with
//     its stop conditions (requests, duration, sessions), concurrency,
//     grace_period, rate, users or auto_offset.
//
// Two values are written although they are duet's defaults, because
// aiperf 0.12 would assume another value without them: timeout (aiperf's
// default is 6 hours) and a fixed schedule's auto_offset (aiperf's default
// is true). prompts.isl is always written for a synthetic dataset: without
// it aiperf 0.12 generates no text. The seed and the command line are not
// BenchmarkConfig fields in 0.12 (the seed belongs to the envelope around
// it); both are in run_info. What 0.12 has no field for is under "duet"
// (duetSection). played is the number of sessions the profiling phase
// started: a file played once has no stop condition in duet, and aiperf
// 0.12 needs one.
func inputConfig(c Config, played int) json.RawMessage {
	c = c.withDefaults()
	var model, models, top section
	model.set("name", c.Model, true)
	models.set("items", []json.RawMessage{writeObject(model)}, true)
	top.add("models", models)
	top.add("endpoint", endpointConfig(c))
	top.set("datasets", []json.RawMessage{datasetConfig(c)}, true)
	top.set("phases", phaseConfigs(c, played), true)
	return writeObject(top)
}

func endpointConfig(c Config) section {
	d := Defaults()
	urls := make([]string, len(c.URLs))
	for i, u := range c.URLs {
		urls[i] = redactURL(u)
	}
	var s section
	s.set("urls", urls, true)
	// url_strategy: aiperf 0.12's only strategy, round_robin, is the default;
	// duet's turn_round_robin is not aiperf's (under "duet" instead).
	s.set("type", c.EndpointType, c.EndpointType != d.EndpointType)
	s.set("path", c.CustomEndpoint, c.CustomEndpoint != "")
	s.set("api_key", redacted, c.APIKey != "")
	s.set("timeout", finite(c.RequestTimeout.Seconds()), c.RequestTimeout != aiperfTimeout)
	s.set("streaming", true, c.Streaming)
	s.set("use_legacy_max_tokens", true, c.LegacyMaxTokens)
	var headers section
	for _, h := range c.Headers {
		v := h.Value
		if secretHeader(h.Name) {
			v = redacted
		}
		// A repeated header replaces the earlier one, as the client sends it.
		headers = slices.DeleteFunc(headers, func(f jsonField) bool { return strings.EqualFold(f.key, h.Name) })
		headers.set(h.Name, v, true)
	}
	s.add("headers", headers)
	var extra []jsonField
	for _, e := range c.ExtraInputs {
		extra = setField(extra, e.Key, e.Value)
	}
	s.add("extra", extra)
	// "none" (no session header at all) has no 0.12 equivalent: under "duet".
	s.set("session_header", c.SessionHeader, c.SessionHeader != d.SessionHeader && c.SessionHeader != "none")
	return s
}

// datasetConfig is the run's dataset, named "main" as aiperf 0.12's CLI
// names it: a FileDataset for --input-file, a SyntheticDataset otherwise.
// --num-sessions limits a file's sessions (entries) and, for a synthetic
// workload, is the number generated; without it a synthetic dataset holds
// --request-count entries, as aiperf's CLI sets them.
func datasetConfig(c Config) json.RawMessage {
	if c.InputFile == "" {
		entries := c.NumSessions
		if entries == 0 {
			entries = c.RequestCount
		}
		return syntheticDataset(c, "main", entries, true)
	}
	var s section
	s.set("name", "main", true)
	s.set("type", "file", true)
	s.set("path", c.InputFile, true)
	s.set("format", c.DatasetType, true)
	s.set("entries", c.NumSessions, c.NumSessions > 0)
	// Only the hash-id loaders (mooncake_trace here) read a block size.
	s.set("block_size", c.HashBlockSize, c.DatasetType == DatasetMooncake && c.HashBlockSize != Defaults().HashBlockSize)
	return writeObject(s)
}

// syntheticDataset is a 0.12 SyntheticDataset generated as duet generates
// sessions from the synthetic options; entries 0 leaves entries out.
// withBlockSize writes --isl-block-size as prompts.block_size, where aiperf's
// CLI puts it for a synthetic dataset.
func syntheticDataset(c Config, name string, entries int, withBlockSize bool) json.RawMessage {
	d := Defaults()
	var prompts, prefix, s section
	prompts.set("isl", distribution(float64(c.ISL), c.ISLStddev), true)
	prompts.set("osl", distribution(float64(c.OSL), c.OSLStddev), c.OSL > 0)
	prompts.set("block_size", c.HashBlockSize, withBlockSize && c.HashBlockSize != d.HashBlockSize)
	prefix.set("shared_system_length", c.SharedSystemPromptLength, c.SharedSystemPromptLength > 0)
	prefix.set("user_context_length", c.UserContextPromptLength, c.UserContextPromptLength > 0)
	prefix.set("pool_size", c.PrefixPromptPoolSize, c.PrefixPromptPoolSize > 0)
	prefix.set("length", c.PrefixPromptLength, c.PrefixPromptLength > 0)
	s.set("name", name, true)
	s.set("type", "synthetic", true)
	s.set("entries", entries, entries > 0)
	s.add("prompts", prompts)
	s.add("prefix_prompts", prefix)
	s.set("turns", distribution(c.TurnsMean, c.TurnsStddev), c.TurnsMean != d.TurnsMean || c.TurnsStddev != 0)
	s.set("turn_delay", distribution(c.TurnDelayMean, c.TurnDelayStddev), c.TurnDelayMean != 0 || c.TurnDelayStddev != 0)
	s.set("turn_delay_ratio", finite(c.TurnDelayRatio), c.TurnDelayRatio != d.TurnDelayRatio)
	return writeObject(s)
}

// distribution is a 0.12 SamplingDistribution as aiperf writes a normal one
// (src/aiperf/config/distributions.py): {mean, stddev}, stddev left out
// when 0 (then a fixed value).
func distribution(mean, stddev float64) json.RawMessage {
	var s section
	s.set("mean", finite(mean), true)
	s.set("stddev", finite(stddev), stddev != 0)
	return writeObject(s)
}

// phaseConfigs are the run's phases in 0.12's PhaseConfig layout
// (src/aiperf/config/phases.py). duet's warm-up is a concurrency burst of
// max(1, --concurrency, --num-users) whatever the profiling load.
func phaseConfigs(c Config, played int) []json.RawMessage {
	var out []json.RawMessage
	if c.WarmupRequestCount > 0 {
		var w section
		w.set("name", PhaseWarmup, true)
		w.set("kind", PhaseWarmup, true)
		w.set("type", "concurrency", true)
		w.set("exclude_from_results", true, true)
		w.set("requests", c.WarmupRequestCount, true)
		w.set("concurrency", max(1, c.Concurrency, c.NumUsers), true)
		out = append(out, writeObject(w))
	}
	typ := c.mode()
	if typ == "concurrency_burst" {
		typ = "concurrency"
	}
	sessions := c.NumSessions
	if sessions == 0 && c.InputFile != "" && !c.FixedSchedule && c.RequestCount == 0 && c.Duration == 0 {
		sessions = played // every session of the file, once
	}
	var p section
	p.set("name", PhaseProfiling, true)
	p.set("kind", PhaseProfiling, true)
	p.set("type", typ, true)
	p.set("requests", c.RequestCount, c.RequestCount > 0)
	p.set("duration", finite(c.Duration.Seconds()), c.Duration > 0)
	p.set("sessions", sessions, sessions > 0)
	p.set("concurrency", c.Concurrency, c.Concurrency > 0) // a ceiling for the other types
	p.set("grace_period", finite(c.GracePeriod.Seconds()), c.Duration > 0)
	switch typ {
	case ArrivalPoisson, ArrivalConstant:
		p.set("rate", finite(c.RequestRate), true)
	case "user_centric":
		p.set("rate", finite(c.UserCentricRate), true)
		p.set("users", c.NumUsers, true)
	case "fixed_schedule":
		p.set("auto_offset", c.FixedScheduleAutoOffset, true)
	}
	return append(out, writeObject(p))
}

// duetSection holds what aiperf does not export: the run's label, the
// oracle's block size, the options aiperf 0.12's input_config has no field
// for, and the per-turn breakdown. Those options: the URL strategy
// (turn_round_robin is duet's), the session header ("none" sends none),
// whether X-Session-Affinity was sent next to it, the prefix prompts'
// length stddev and Zipf exponent (duet's); with --input-file and a
// warm-up, the synthetic dataset the warm-up's sessions come from
// (warmup_dataset, in 0.12's SyntheticDataset layout), since 0.12 warms up
// on the run's own dataset.
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
	fields := []jsonField{
		{"label", mustJSON(info.Label)}, {"version", mustJSON(info.Version)},
		{"oracle_block_size", mustJSON(c.OracleBlockSize)}, {"load_mode", mustJSON(c.mode())},
		{"url_strategy", mustJSON(c.URLStrategy)}, {"session_header", mustJSON(c.SessionHeader)},
		{"session_affinity_header", mustJSON(c.SessionHeader != "none" && !c.NoAffinityHeader)},
	}
	if c.PrefixPromptLengthStddev > 0 {
		fields = append(fields, jsonField{"prefix_prompt_length_stddev", finite(c.PrefixPromptLengthStddev)})
	}
	if c.PrefixPromptZipf > 0 {
		fields = append(fields, jsonField{"prefix_prompt_zipf", finite(c.PrefixPromptZipf)})
	}
	if c.InputFile != "" && c.WarmupRequestCount > 0 {
		fields = append(fields, jsonField{"warmup_dataset", syntheticDataset(c, PhaseWarmup, 0, false)})
	}
	return writeObject(append(fields, jsonField{"turns", mustJSON(turns)}))
}
