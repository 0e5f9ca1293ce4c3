package loadgen

import (
	"sort"
	"time"
)

// Metric is one aggregated metric of a run: a distribution (Stats) or a
// single value (Value). Tags and units are aiperf's; tags aiperf does not
// have are duet's additions.
type Metric struct {
	Tag, Header, Unit string
	Stats             *Stats
	Value             *float64
}

// ErrorCount is one kind of error and how often it happened, in aiperf's
// error_summary shape.
type ErrorCount struct {
	Details ErrorDetails `json:"error_details"`
	Count   int          `json:"count"`
}

// URLCount is how many requests went to one URL and how many failed.
type URLCount struct {
	URL              string
	Requests, Errors int
}

// TurnSummary aggregates the successful requests of one turn index.
type TurnSummary struct {
	TurnIndex int `json:"turn_index"`
	Requests  int `json:"requests"`
	Errors    int `json:"errors"`
	// TTFT is in milliseconds (streaming runs only).
	TTFT *Stats `json:"-"`
	// Token sums: server-reported prompt and cached tokens (requests with
	// usage), the client's prompt tokens and the oracle's reusable tokens.
	PromptTokens       int64 `json:"prompt_tokens"`
	CachedTokens       int64 `json:"cached_tokens"`
	ClientPromptTokens int64 `json:"client_prompt_tokens"`
	OracleTokens       int64 `json:"oracle_tokens"`
}

// HitRatio is the cached share of the turn's prompt tokens.
func (t TurnSummary) HitRatio() (float64, bool) { return ratio(t.CachedTokens, t.PromptTokens) }

// OracleRatio is the oracle's reusable share of the turn's prompt tokens.
func (t TurnSummary) OracleRatio() (float64, bool) {
	return ratio(t.OracleTokens, t.ClientPromptTokens)
}

// Summary aggregates the profiling records of a run.
type Summary struct {
	Metrics []Metric
	Errors  []ErrorCount
	Turns   []TurnSummary
	// URLs counts the requests per URL, in the order first used.
	URLs []URLCount
	// Start is the first request's start, End the last response's end.
	Start, End time.Time
}

// Metric returns the metric with tag, or nil.
func (s *Summary) Metric(tag string) *Metric {
	for i := range s.Metrics {
		if s.Metrics[i].Tag == tag {
			return &s.Metrics[i]
		}
	}
	return nil
}

// dist describes a per-request distribution metric.
type dist struct {
	tag, header, unit string
	value             func(r *Record) (float64, bool)
}

func ms(d time.Duration, ok bool) (float64, bool) { return float64(d) / 1e6, ok }

var dists = []dist{
	{"time_to_first_token", "Time to First Token", "ms", func(r *Record) (float64, bool) { return ms(r.TTFT()) }},
	{"time_to_first_token_first_turn", "TTFT, First Turn", "ms", func(r *Record) (float64, bool) {
		v, ok := ms(r.TTFT())
		return v, ok && r.TurnIndex == 0
	}},
	{"time_to_first_token_later_turns", "TTFT, Later Turns", "ms", func(r *Record) (float64, bool) {
		v, ok := ms(r.TTFT())
		return v, ok && r.TurnIndex > 0
	}},
	{"time_to_second_token", "Time to Second Token", "ms", func(r *Record) (float64, bool) { return ms(r.TTST()) }},
	{"request_latency", "Request Latency", "ms", func(r *Record) (float64, bool) { return ms(r.Latency()) }},
	{"inter_token_latency", "Inter Token Latency", "ms", func(r *Record) (float64, bool) {
		v, ok := r.ITL()
		return v / 1e6, ok
	}},
	{"output_token_throughput_per_user", "Output Token Throughput Per User", "tokens/sec/user", (*Record).TokensPerSecPerUser},
	{"output_sequence_length", "Output Sequence Length", "tokens", func(r *Record) (float64, bool) {
		return float64(r.OutputTokens()), r.OK()
	}},
	{"input_sequence_length", "Input Sequence Length", "tokens", func(r *Record) (float64, bool) {
		return float64(r.InputTokens()), r.OK()
	}},
	{"usage_prompt_tokens", "Usage Prompt Tokens", "tokens", func(r *Record) (float64, bool) {
		return float64(r.PromptTokens), r.OK() && r.HasUsage
	}},
	{"usage_prompt_cache_read_tokens", "Usage Prompt Cache Read Tokens", "tokens", func(r *Record) (float64, bool) {
		return float64(r.CachedTokens), r.OK() && r.HasUsage
	}},
	{"oracle_prefix_tokens", "Oracle Prefix Tokens", "tokens", func(r *Record) (float64, bool) {
		return float64(r.OracleTokens), r.OK()
	}},
}

// SummarizeRecords aggregates the profiling records among records.
func SummarizeRecords(records []Record) *Summary {
	var prof []*Record
	for i := range records {
		if records[i].Phase == PhaseProfiling {
			prof = append(prof, &records[i])
		}
	}
	s := &Summary{}
	for _, d := range dists {
		var xs []float64
		for _, r := range prof {
			if v, ok := d.value(r); ok {
				xs = append(xs, v)
			}
		}
		if len(xs) > 0 {
			st := Summarize(xs)
			s.Metrics = append(s.Metrics, Metric{Tag: d.tag, Header: d.header, Unit: d.unit, Stats: &st})
		}
	}
	s.addTotals(prof)
	s.Errors = errorSummary(prof)
	s.Turns = turnSummaries(prof)
	s.URLs = urlCounts(prof)
	return s
}

// urlCounts counts the requests per URL, in the order first used.
func urlCounts(prof []*Record) []URLCount {
	var counts []URLCount
	index := map[string]int{}
	for _, r := range prof {
		i, ok := index[r.URL]
		if !ok {
			i = len(counts)
			index[r.URL] = i
			counts = append(counts, URLCount{URL: r.URL})
		}
		counts[i].Requests++
		if !r.OK() {
			counts[i].Errors++
		}
	}
	return counts
}

func (s *Summary) addValue(tag, header, unit string, v float64) {
	s.Metrics = append(s.Metrics, Metric{Tag: tag, Header: header, Unit: unit, Value: &v})
}

// addTotals adds the run-level metrics: throughput over the profiling
// window (first request sent to last response received), counts, token
// totals and the cache ratios.
func (s *Summary) addTotals(prof []*Record) {
	var ok, failed int
	var isl, osl, prompt, cached, clientPrompt, oracle int64
	for _, r := range prof {
		if !r.Start.IsZero() && (s.Start.IsZero() || r.Start.Before(s.Start)) {
			s.Start = r.Start
		}
		if !r.OK() {
			failed++
			continue
		}
		ok++
		if end := r.responseEnd(); end.After(s.End) {
			s.End = end
		}
		isl += int64(r.InputTokens())
		osl += int64(r.OutputTokens())
		clientPrompt += int64(r.ClientPromptTokens)
		oracle += int64(r.OracleTokens)
		if r.HasUsage {
			prompt += int64(r.PromptTokens)
			cached += int64(r.CachedTokens)
		}
	}
	if ok == 0 {
		for _, r := range prof {
			if r.End.After(s.End) {
				s.End = r.End
			}
		}
	}
	if dur := s.End.Sub(s.Start).Seconds(); ok > 0 && dur > 0 {
		s.addValue("output_token_throughput", "Output Token Throughput", "tokens/sec", float64(osl)/dur)
		s.addValue("request_throughput", "Request Throughput", "requests/sec", float64(ok)/dur)
	}
	s.addValue("request_count", "Request Count", "requests", float64(ok))
	s.addValue("error_request_count", "Error Request Count", "requests", float64(failed))
	if !s.Start.IsZero() && s.End.After(s.Start) {
		s.addValue("benchmark_duration", "Benchmark Duration", "sec", s.End.Sub(s.Start).Seconds())
	}
	if ok > 0 {
		s.addValue("total_isl", "Total Input Sequence Length", "tokens", float64(isl))
		s.addValue("total_osl", "Total Output Sequence Length", "tokens", float64(osl))
		s.addValue("total_usage_prompt_tokens", "Total Usage Prompt Tokens", "tokens", float64(prompt))
		s.addValue("total_usage_prompt_cache_read_tokens", "Total Usage Prompt Cache Read Tokens", "tokens", float64(cached))
		s.addValue("total_oracle_prefix_tokens", "Total Oracle Prefix Tokens", "tokens", float64(oracle))
	}
	hit, okHit := ratio(cached, prompt)
	orc, okOrc := ratio(oracle, clientPrompt)
	if okHit {
		s.addValue("cache_hit_ratio", "Cache Hit Ratio", "ratio", hit)
	}
	if okOrc {
		s.addValue("oracle_hit_ratio", "Oracle Hit Ratio", "ratio", orc)
	}
	if okHit && okOrc && orc > 0 {
		s.addValue("routing_efficiency", "Routing Efficiency", "ratio", hit/orc)
	}
}

func ratio(num, den int64) (float64, bool) {
	if den <= 0 {
		return 0, false
	}
	return float64(num) / float64(den), true
}

// errorSummary counts errors by (code, type), keeping the first message of
// each kind, most frequent first.
func errorSummary(prof []*Record) []ErrorCount {
	type key struct {
		code int
		typ  string
	}
	idx := map[key]int{}
	var out []ErrorCount
	for _, r := range prof {
		if r.OK() {
			continue
		}
		k := key{-1, r.Err.Type}
		if r.Err.Code != nil {
			k.code = *r.Err.Code
		}
		i, seen := idx[k]
		if !seen {
			i = len(out)
			idx[k] = i
			out = append(out, ErrorCount{Details: *r.Err})
		}
		out[i].Count++
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	return out
}

func turnSummaries(prof []*Record) []TurnSummary {
	var turns []TurnSummary
	ttfts := map[int][]float64{}
	for _, r := range prof {
		for len(turns) <= r.TurnIndex {
			turns = append(turns, TurnSummary{TurnIndex: len(turns)})
		}
		t := &turns[r.TurnIndex]
		if !r.OK() {
			t.Errors++
			continue
		}
		t.Requests++
		t.ClientPromptTokens += int64(r.ClientPromptTokens)
		t.OracleTokens += int64(r.OracleTokens)
		if r.HasUsage {
			t.PromptTokens += int64(r.PromptTokens)
			t.CachedTokens += int64(r.CachedTokens)
		}
		if v, ok := ms(r.TTFT()); ok {
			ttfts[r.TurnIndex] = append(ttfts[r.TurnIndex], v)
		}
	}
	for i := range turns {
		if xs := ttfts[i]; len(xs) > 0 {
			st := Summarize(xs)
			turns[i].TTFT = &st
		}
	}
	return turns
}
