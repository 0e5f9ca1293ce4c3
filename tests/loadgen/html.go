package loadgen

import (
	"bufio"
	"fmt"
	"html/template"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// reportData feeds the HTML report template.
type reportData struct {
	Label, Command, Version string
	Info                    [][2]string
	Metrics                 [][]string
	MetricHeader            []string
	Turns                   [][]string
	TurnHeader              []string
	Errors                  [][]string
	TTFTByTurn, TTFTCDF     template.HTML
	HitByTurn               template.HTML
	NoTTFT                  bool
}

var reportTemplate = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>duet bench: {{.Label}}</title>
<style>
body{font-family:sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
.info td{text-align:left}.charts{display:flex;flex-wrap:wrap;gap:1em}
figure{margin:0}figcaption{font-weight:bold;font-size:.9em;margin-bottom:.3em}
code{font-size:.85em;white-space:pre-wrap;overflow-wrap:break-word}
</style></head><body>
<h1>duet bench: {{.Label}}</h1>
<table class="info">{{range .Info}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>
{{if .Command}}<p><code>{{.Command}}</code></p>{{end}}
<div class="charts">
{{if .NoTTFT}}<p>No TTFT: the run did not use <code>--streaming</code>.</p>{{else}}
<figure><figcaption>TTFT by turn index</figcaption>{{.TTFTByTurn}}</figure>
<figure><figcaption>TTFT CDF: first turn vs later turns</figcaption>{{.TTFTCDF}}</figure>{{end}}
<figure><figcaption>KV cache hit ratio by turn: measured (server usage) vs oracle</figcaption>{{.HitByTurn}}</figure>
</div>
<h2>Metrics</h2>
<table><tr>{{range .MetricHeader}}<th>{{.}}</th>{{end}}</tr>
{{range .Metrics}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>
<h2>By turn</h2>
<table><tr>{{range .TurnHeader}}<th>{{.}}</th>{{end}}</tr>
{{range .Turns}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>
{{if .Errors}}<h2>Errors</h2><table><tr><th>count</th><th>code</th><th>type</th><th>message</th></tr>
{{range .Errors}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>{{end}}
<p style="font-size:.8em;color:#666">{{.Version}}. Hit ratio = cached prompt tokens / prompt tokens (server usage).
Oracle = prompt tokens an ideal router with an unlimited cache could reuse (longest block-aligned prefix shared
with any earlier prompt of the run). Routing efficiency = hit ratio / oracle ratio.</p>
</body></html>
`))

func writeReport(w *bufio.Writer, res *Result, sum *Summary, info RunInfo) error {
	c := res.Config
	d := reportData{Label: info.Label, Command: info.CLICommand, Version: info.Version,
		MetricHeader: []string{"Metric", "avg", "min", "max", "p50", "p90", "p99", "std"}}
	load := c.mode()
	switch {
	case c.RequestRate > 0:
		load += fmt.Sprintf(", %g req/s", c.RequestRate)
	case c.UserCentricRate > 0:
		load += fmt.Sprintf(", %g req/s over %d users", c.UserCentricRate, c.NumUsers)
	}
	if c.Concurrency > 0 {
		load += fmt.Sprintf(", concurrency %d", c.Concurrency)
	}
	workload := "synthetic"
	if c.InputFile != "" {
		workload = c.DatasetType + " " + c.InputFile
	}
	d.Info = [][2]string{
		{"model", c.Model}, {"endpoint", endpointURLs(c)}, {"streaming", strconv.FormatBool(c.Streaming)},
		{"load", load}, {"workload", workload}, {"sessions", strconv.Itoa(len(res.Sessions))},
		{"random seed", strconv.FormatUint(c.Seed, 10)},
		{"started", sum.Start.Local().Format(time.RFC3339)}, {"cancelled", strconv.FormatBool(res.Cancelled)},
	}
	for i := range sum.Metrics {
		m := &sum.Metrics[i]
		d.Metrics = append(d.Metrics, grouped(metricRow(m, []string{"avg", "min", "max", "p50", "p90", "p99", "std"}, "")))
	}
	d.TurnHeader = turnTable(nil).header
	for _, t := range sum.Turns {
		d.Turns = append(d.Turns, grouped(turnRow(t)))
	}
	for _, e := range sum.Errors {
		code := "-"
		if e.Details.Code != nil {
			code = strconv.Itoa(*e.Details.Code)
		}
		d.Errors = append(d.Errors, []string{strconv.Itoa(e.Count), code, e.Details.Type, e.Details.Message})
	}
	d.TTFTByTurn, d.TTFTCDF, d.NoTTFT = ttftCharts(sum, res.Records)
	d.HitByTurn = hitChart(sum)
	return reportTemplate.Execute(w, d)
}

// endpointURLs is the full URL of each server the run called.
func endpointURLs(c Config) string {
	urls := make([]string, len(c.URLs))
	for i, u := range c.URLs {
		urls[i] = strings.TrimRight(u, "/") + c.endpointPath()
	}
	return strings.Join(urls, ", ")
}

// grouped writes the whole numbers of a table row with thousands
// separators, for people (the CSV and JSON exports keep plain numbers).
func grouped(row []string) []string {
	for i, cell := range row {
		if n, err := strconv.ParseInt(cell, 10, 64); err == nil && (n >= 1000 || n <= -1000) {
			row[i] = groupDigits(n)
		}
	}
	return row
}

// groupDigits writes n with a comma every three digits.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	start := 0
	if n < 0 {
		start = 1
	}
	for i := len(s) - 3; i > start; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func turnRow(tu TurnSummary) []string {
	return turnTable([]TurnSummary{tu}).rows[0]
}

func ttftCharts(sum *Summary, records []Record) (byTurn, cdf template.HTML, none bool) {
	var avg, p50, p90, p99 series
	// Drawn widest first, so that lines that coincide (the first turns'
	// percentiles often do) all stay visible.
	avg = series{name: "avg", color: palette[0], width: 2}
	p50 = series{name: "p50", color: palette[1], width: 4}
	p90 = series{name: "p90", color: palette[2], width: 6}
	p99 = series{name: "p99", color: palette[3], width: 8}
	for _, t := range sum.Turns {
		if t.TTFT == nil {
			continue
		}
		x := float64(t.TurnIndex)
		avg.points = append(avg.points, [2]float64{x, t.TTFT.Avg})
		p50.points = append(p50.points, [2]float64{x, t.TTFT.P50})
		p90.points = append(p90.points, [2]float64{x, t.TTFT.P90})
		p99.points = append(p99.points, [2]float64{x, t.TTFT.P99})
	}
	if len(avg.points) == 0 {
		return "", "", true
	}
	byTurn = lineChart([]series{p99, p90, p50, avg}, "turn index", "TTFT (ms)", 0, 0, true)
	var first, later []float64
	for i := range records {
		r := &records[i]
		if r.Phase != PhaseProfiling {
			continue
		}
		if v, ok := ms(r.TTFT()); ok {
			if r.TurnIndex == 0 {
				first = append(first, v)
			} else {
				later = append(later, v)
			}
		}
	}
	var ss []series
	for i, s := range []struct {
		name string
		xs   []float64
	}{{"first turn", first}, {"later turns", later}} {
		if len(s.xs) > 0 {
			ss = append(ss, series{name: fmt.Sprintf("%s (n=%d)", s.name, len(s.xs)), color: palette[i], points: cdfPoints(s.xs), step: true})
		}
	}
	return byTurn, lineChart(ss, "TTFT (ms)", "fraction of requests", 0, 1, false), false
}

// cdfPoints returns the empirical CDF of xs, at most ~400 points.
func cdfPoints(xs []float64) [][2]float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	step := max(1, len(s)/400)
	pts := [][2]float64{{s[0], 0}}
	for i := 0; i < len(s); i += step {
		pts = append(pts, [2]float64{s[i], float64(i+1) / float64(len(s))})
	}
	return append(pts, [2]float64{s[len(s)-1], 1})
}

func hitChart(sum *Summary) template.HTML {
	cats := make([]string, len(sum.Turns))
	hit := bars{name: "measured hit ratio", color: palette[0], values: make([]float64, len(sum.Turns))}
	orc := bars{name: "oracle", color: palette[2], values: make([]float64, len(sum.Turns))}
	for i, t := range sum.Turns {
		cats[i] = strconv.Itoa(t.TurnIndex)
		hit.values[i], orc.values[i] = math.NaN(), math.NaN()
		if v, ok := t.HitRatio(); ok {
			hit.values[i] = v
		}
		if v, ok := t.OracleRatio(); ok {
			orc.values[i] = v
		}
	}
	return barChart(cats, []bars{hit, orc}, "turn index", "share of prompt tokens", 1)
}
