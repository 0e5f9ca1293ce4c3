package loadgen

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// consoleHidden are metrics the console table leaves to the exports.
var consoleHidden = map[string]bool{
	"usage_prompt_tokens": true, "total_isl": true, "total_osl": true, "total_usage_prompt_tokens": true,
	"total_usage_prompt_cache_read_tokens": true, "total_oracle_prefix_tokens": true,
}

// maxTurnRows bounds the per-turn table; the JSON export has every turn.
const maxTurnRows = 20

// PrintSummary writes aiperf's end-of-run tables: the metrics (avg, min,
// max, p99, p90, p50, std), then duet's per-turn breakdown, the requests
// per URL when there were several, and the errors.
func PrintSummary(w io.Writer, sum *Summary) {
	t := &table{title: "duet bench | LLM Metrics", header: []string{"Metric", "avg", "min", "max", "p99", "p90", "p50", "std"}}
	for i := range sum.Metrics {
		m := &sum.Metrics[i]
		if consoleHidden[m.Tag] {
			continue
		}
		t.rows = append(t.rows, metricRow(m, []string{"avg", "min", "max", "p99", "p90", "p50", "std"}, "-"))
	}
	t.write(w)
	if len(sum.Turns) > 0 {
		fmt.Fprintln(w)
		turnTable(sum.Turns).write(w)
	}
	if len(sum.URLs) > 1 {
		fmt.Fprintln(w)
		ut := &table{title: "Requests per URL", header: []string{"url", "requests", "errors"}}
		for _, u := range sum.URLs {
			ut.rows = append(ut.rows, []string{u.URL, strconv.Itoa(u.Requests), strconv.Itoa(u.Errors)})
		}
		ut.write(w)
	}
	if len(sum.Errors) > 0 {
		fmt.Fprintln(w)
		et := &table{title: "Errors", header: []string{"count", "code", "type", "message"}}
		for _, e := range sum.Errors {
			code := "-"
			if e.Details.Code != nil {
				code = strconv.Itoa(*e.Details.Code)
			}
			et.rows = append(et.rows, []string{strconv.Itoa(e.Count), code, e.Details.Type, truncate(e.Details.Message, 80)})
		}
		et.write(w)
	}
}

func turnTable(turns []TurnSummary) *table {
	t := &table{title: "TTFT and KV cache reuse by turn",
		header: []string{"turn", "requests", "errors", "TTFT avg (ms)", "TTFT p50", "TTFT p90", "TTFT p99",
			"prompt tok", "cached tok", "hit ratio", "oracle"}}
	for i, tu := range turns {
		if i == maxTurnRows {
			t.note = fmt.Sprintf("(%d more turns in %s)", len(turns)-maxTurnRows, FileSummaryJSON)
			break
		}
		row := []string{strconv.Itoa(tu.TurnIndex), strconv.Itoa(tu.Requests), strconv.Itoa(tu.Errors)}
		if s := tu.TTFT; s != nil {
			row = append(row, number(s.Avg, "ms"), number(s.P50, "ms"), number(s.P90, "ms"), number(s.P99, "ms"))
		} else {
			row = append(row, "-", "-", "-", "-")
		}
		avg := func(sum int64) string {
			if tu.Requests == 0 {
				return "-"
			}
			return number(float64(sum)/float64(tu.Requests), "tokens")
		}
		row = append(row, avg(tu.PromptTokens), avg(tu.CachedTokens), ratioCell(tu.HitRatio()), ratioCell(tu.OracleRatio()))
		t.rows = append(t.rows, row)
	}
	return t
}

func ratioCell(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return number(v, "ratio")
}

// number formats like aiperf's console: thousands separators and two
// decimals (three for ratios).
func number(v float64, unit string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	if unit == "ratio" {
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	s := strconv.FormatFloat(math.Abs(v), 'f', 2, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
	}
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String() + "." + frac
}

// table is a box-drawn table in the style of aiperf's console output: the
// first column right-aligned like the numbers.
type table struct {
	title  string
	header []string
	rows   [][]string
	note   string
}

func (t *table) write(w io.Writer) {
	widths := make([]int, len(t.header))
	for i, h := range t.header {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	line := func(l, fill, sep, r string) string {
		parts := make([]string, len(widths))
		for i, wd := range widths {
			parts[i] = strings.Repeat(fill, wd+2)
		}
		return l + strings.Join(parts, sep) + r
	}
	row := func(edge, sep string, cells []string) string {
		parts := make([]string, len(widths))
		for i, wd := range widths {
			parts[i] = " " + pad(cells[i], wd) + " "
		}
		return edge + strings.Join(parts, sep) + edge
	}
	top := line("┏", "━", "┳", "┓")
	if t.title != "" {
		fmt.Fprintln(w, center(t.title, utf8.RuneCountInString(top)))
	}
	fmt.Fprintln(w, top)
	fmt.Fprintln(w, row("┃", "┃", t.header))
	fmt.Fprintln(w, line("┡", "━", "╇", "┩"))
	for _, r := range t.rows {
		fmt.Fprintln(w, row("│", "│", r))
	}
	fmt.Fprintln(w, line("└", "─", "┴", "┘"))
	if t.note != "" {
		fmt.Fprintln(w, t.note)
	}
}

func pad(s string, width int) string {
	return strings.Repeat(" ", max(0, width-utf8.RuneCountInString(s))) + s
}

func center(s string, width int) string {
	return strings.Repeat(" ", max(0, (width-utf8.RuneCountInString(s))/2)) + s
}

// metricRow is one metric as a table row: its name, then the given stats,
// or, for a single-value metric, the value and blank in the other columns.
func metricRow(m *Metric, stats []string, blank string) []string {
	row := []string{csvName(m)}
	if m.Value != nil {
		row = append(row, valueNumber(*m.Value, m.Unit, number))
		for range stats[1:] {
			row = append(row, blank)
		}
		return row
	}
	for _, name := range stats {
		v, _ := m.Stats.Get(name)
		row = append(row, number(v, m.Unit))
	}
	return row
}

// valueNumber formats a single-value metric for people: counts of requests
// and tokens as integers, others with format.
func valueNumber(v float64, unit string, format func(float64, string) string) string {
	if (unit == "requests" || unit == "tokens") && v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return strconv.FormatInt(int64(v), 10)
	}
	return format(v, unit)
}
