package loadgen

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
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

// writeSummaryCSV writes the CSV as aiperf 0.12.0 writes it
// (exporters/metrics_csv_exporter.py): distribution metrics with their
// statistics, sorted by tag; a blank row; single-value metrics, sorted by
// tag; every number with two decimals; CRLF line ends.
func writeSummaryCSV(w *bufio.Writer, sum *Summary) error {
	cw := csv.NewWriter(w)
	cw.UseCRLF = true
	var dists, values []*Metric
	for i := range sum.Metrics {
		if sum.Metrics[i].Stats != nil {
			dists = append(dists, &sum.Metrics[i])
		} else {
			values = append(values, &sum.Metrics[i])
		}
	}
	byTag := func(ms []*Metric) { sort.Slice(ms, func(i, j int) bool { return ms[i].Tag < ms[j].Tag }) }
	byTag(dists)
	byTag(values)
	if len(dists) > 0 {
		if err := cw.Write(append([]string{"Metric"}, CSVStatNames...)); err != nil {
			return err
		}
		for _, m := range dists {
			row := []string{csvName(m)}
			for _, name := range CSVStatNames {
				v, _ := m.Stats.Get(name)
				row = append(row, csvNumber(v))
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
			if err := cw.Write([]string{csvName(m), csvNumber(*m.Value)}); err != nil {
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

// csvNumber formats a value as aiperf does, f"{v:.2f}": two decimals, and
// nan / inf / -inf as Python spells them.
func csvNumber(v float64) string {
	switch {
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// writeRecords writes profile_export.jsonl: one line per request, warm-up
// included (benchmark_phase tells them apart), as aiperf writes it.
func writeRecords(w *bufio.Writer, records []Record) error {
	for i := range records {
		r := &records[i]
		if _, err := w.Write(recordJSON(r)); err != nil {
			return err
		}
		if err := w.WriteByte('\n'); err != nil {
			return err
		}
	}
	return nil
}

// recordJSON renders one record in aiperf 0.12's MetricRecordInfo shape,
// dumped as it dumps it (exclude_none): no null field, and no error key on
// a request that succeeded.
func recordJSON(r *Record) []byte {
	var meta section
	meta.set("session_num", r.SessionNum, true)
	meta.set("x_request_id", r.RequestID, r.RequestID != "")
	meta.set("x_correlation_id", r.CorrelationID, r.CorrelationID != "")
	meta.set("conversation_id", r.ConversationID, r.ConversationID != "")
	meta.set("turn_index", r.TurnIndex, true)
	meta.set("request_start_ns", r.Start.UnixNano(), true)
	meta.set("request_ack_ns", r.Ack.UnixNano(), !r.Ack.IsZero())
	meta.set("request_end_ns", r.End.UnixNano(), true)
	meta.set("worker_id", "duet-bench", true)
	meta.set("record_processor_id", "duet-bench", true)
	meta.set("benchmark_phase", r.Phase, true)
	meta.set("was_cancelled", r.Cancelled, true)
	meta.set("cancellation_time_ns", r.End.UnixNano(), r.Cancelled && !r.End.IsZero())
	meta.set("context_overflow_skip", false, true)
	meta.set("agent_depth", 0, true)
	fields := []jsonField{{"metadata", writeObject(meta)}, {"metrics", recordMetrics(r)}}
	if r.Err != nil {
		fields = append(fields, jsonField{"error", mustJSON(r.Err)})
	}
	return writeObject(fields)
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
