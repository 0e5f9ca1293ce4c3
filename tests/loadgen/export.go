package loadgen

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The artifact files of a run, named as aiperf names them (plus the HTML
// report).
const (
	FileSummaryJSON = "profile_export_aiperf.json"
	FileSummaryCSV  = "profile_export_aiperf.csv"
	FileRecords     = "profile_export.jsonl"
	FileInputs      = "inputs.json"
	FileReport      = "report.html"
)

// RunInfo describes a run for its exports.
type RunInfo struct {
	// Label names the run in reports and in `duet bench compare` (default:
	// the artifact directory's name).
	Label string
	// CLICommand is the command line that started the run.
	CLICommand string
	// Version is duet's version string.
	Version string
}

// WriteArtifacts writes every export of a run into dir (created if needed)
// and returns the paths written.
func WriteArtifacts(dir string, res *Result, sum *Summary, info RunInfo) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if info.Label == "" {
		info.Label = filepath.Base(filepath.Clean(dir))
	}
	writers := []struct {
		name  string
		write func(*bufio.Writer) error
	}{
		{FileSummaryJSON, func(w *bufio.Writer) error { return writeSummaryJSON(w, res, sum, info) }},
		{FileSummaryCSV, func(w *bufio.Writer) error { return writeSummaryCSV(w, sum) }},
		{FileRecords, func(w *bufio.Writer) error { return writeRecords(w, res.Records) }},
		{FileInputs, func(w *bufio.Writer) error { return writeInputs(w, res) }},
		{FileReport, func(w *bufio.Writer) error { return writeReport(w, res, sum, info) }},
	}
	var paths []string
	for _, wr := range writers {
		path := filepath.Join(dir, wr.name)
		if err := writeFile(path, wr.write); err != nil {
			return paths, fmt.Errorf("writing %s: %w", path, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func writeFile(path string, write func(*bufio.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 256<<10)
	if err := write(w); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

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
			"streaming": c.Streaming, "url": c.URL, "session_header": c.SessionHeader,
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

// writeSummaryCSV writes aiperf's two-section CSV: distribution metrics
// with their statistics, a blank line, then single-value metrics.
func writeSummaryCSV(w *bufio.Writer, sum *Summary) error {
	cw := csv.NewWriter(w)
	header := append([]string{"Metric"}, StatNames...)
	var dists, values []*Metric
	for i := range sum.Metrics {
		if sum.Metrics[i].Stats != nil {
			dists = append(dists, &sum.Metrics[i])
		} else {
			values = append(values, &sum.Metrics[i])
		}
	}
	if len(dists) > 0 {
		if err := cw.Write(header); err != nil {
			return err
		}
		for _, m := range dists {
			row := []string{csvName(m)}
			for _, name := range StatNames {
				v, _ := m.Stats.Get(name)
				row = append(row, csvNumber(v, m.Unit))
			}
			if err := cw.Write(row); err != nil {
				return err
			}
		}
		if len(values) > 0 {
			if err := cw.Write(nil); err != nil {
				return err
			}
		}
	}
	if len(values) > 0 {
		if err := cw.Write([]string{"Metric", "Value"}); err != nil {
			return err
		}
		for _, m := range values {
			if err := cw.Write([]string{csvName(m), csvNumber(*m.Value, m.Unit)}); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// csvName is the header with its unit, as aiperf writes it.
func csvName(m *Metric) string {
	if m.Unit == "" || m.Unit == "requests" || m.Unit == "count" {
		return m.Header
	}
	return m.Header + " (" + m.Unit + ")"
}

// csvNumber formats with two decimals as aiperf does (four for ratios).
func csvNumber(v float64, unit string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	if unit == "ratio" {
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// writeRecords writes profile_export.jsonl: one line per profiling request.
func writeRecords(w *bufio.Writer, records []Record) error {
	for i := range records {
		r := &records[i]
		if r.Phase != PhaseProfiling {
			continue
		}
		if _, err := w.Write(recordJSON(r)); err != nil {
			return err
		}
		if err := w.WriteByte('\n'); err != nil {
			return err
		}
	}
	return nil
}

func nsOrNull(t time.Time) json.RawMessage {
	if t.IsZero() {
		return json.RawMessage("null")
	}
	return mustJSON(t.UnixNano())
}

// recordJSON renders one record in aiperf's MetricRecordInfo shape.
func recordJSON(r *Record) []byte {
	cancelTime := json.RawMessage("null")
	if r.Cancelled {
		cancelTime = nsOrNull(r.End)
	}
	meta := writeObject([]jsonField{
		{"session_num", mustJSON(r.SessionNum)},
		{"x_request_id", mustJSON(r.RequestID)},
		{"x_correlation_id", mustJSON(r.CorrelationID)},
		{"conversation_id", mustJSON(r.ConversationID)},
		{"turn_index", mustJSON(r.TurnIndex)},
		{"request_start_ns", nsOrNull(r.Start)},
		{"request_ack_ns", nsOrNull(r.Ack)},
		{"request_end_ns", nsOrNull(r.End)},
		{"worker_id", mustJSON("duet-bench")},
		{"record_processor_id", mustJSON("duet-bench")},
		{"benchmark_phase", mustJSON(r.Phase)},
		{"was_cancelled", mustJSON(r.Cancelled)},
		{"cancellation_time_ns", cancelTime},
	})
	errJSON := json.RawMessage("null")
	if r.Err != nil {
		errJSON = mustJSON(r.Err)
	}
	return writeObject([]jsonField{{"metadata", meta}, {"metrics", recordMetrics(r)}, {"error", errJSON}})
}

func recordMetrics(r *Record) json.RawMessage {
	var fields []jsonField
	add := func(tag, unit string, v float64, ok bool) {
		if ok {
			fields = append(fields, jsonField{tag, writeObject([]jsonField{{"value", finite(v)}, {"unit", mustJSON(unit)}})})
		}
	}
	if !r.OK() {
		add("error_isl", "tokens", float64(r.ClientPromptTokens), true)
		return writeObject(fields)
	}
	add("input_sequence_length", "tokens", float64(r.InputTokens()), true)
	v, ok := ms(r.TTFT())
	add("time_to_first_token", "ms", v, ok)
	v, ok = ms(r.TTST())
	add("time_to_second_token", "ms", v, ok)
	v, ok = ms(r.Latency())
	add("request_latency", "ms", v, ok)
	add("output_token_count", "tokens", float64(r.OutputTokens()), true)
	add("output_sequence_length", "tokens", float64(r.OutputTokens()), true)
	itl, ok := r.ITL()
	add("inter_token_latency", "ms", itl/1e6, ok)
	v, ok = r.TokensPerSecPerUser()
	add("output_token_throughput_per_user", "tokens/sec/user", v, ok)
	add("usage_prompt_tokens", "tokens", float64(r.PromptTokens), r.HasUsage)
	add("usage_completion_tokens", "tokens", float64(r.CompletionTokens), r.HasUsage)
	add("usage_prompt_cache_read_tokens", "tokens", float64(r.CachedTokens), r.HasUsage)
	add("client_prompt_tokens", "tokens", float64(r.ClientPromptTokens), true)
	add("oracle_prefix_tokens", "tokens", float64(r.OracleTokens), true)
	return writeObject(fields)
}

// writeInputs writes inputs.json: every profiled session with the payload
// of each of its turns as the dataset defines it (a multi-turn run also
// resends earlier turns and the model's replies, which only exist at run
// time).
func writeInputs(w *bufio.Writer, res *Result) error {
	if _, err := w.WriteString("{\"data\": [\n"); err != nil {
		return err
	}
	for i, s := range res.Sessions {
		conv := newConversation(s)
		payloads := make([]json.RawMessage, len(s.Turns))
		for k := range s.Turns {
			payloads[k] = body(res.Config, conv.messages(k), s.Turns[k].MaxTokens)
		}
		line := writeObject([]jsonField{{"session_id", mustJSON(s.ID)}, {"payloads", mustJSON(payloads)}})
		if i > 0 {
			if _, err := w.WriteString(",\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	_, err := w.WriteString("\n]}\n")
	return err
}
