package loadgen

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// Minimal inline-SVG charts for the HTML report: no scripts, no external
// resources, so the report opens offline.

const (
	chartW, chartH             = 640, 300
	padL, padR, padTop, padBot = 60, 16, 30, 44
)

// series is one line of a line chart.
type series struct {
	name   string
	color  string
	points [][2]float64
	step   bool // draw as a step function (CDFs)
	// width is the stroke width, 0 for the default 2: lines drawn under
	// others wider stay visible where they coincide.
	width float64
}

// bars is one series of a grouped bar chart.
type bars struct {
	name   string
	color  string
	values []float64 // NaN: no bar
}

// palette are the series colours.
var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"}

type axis struct{ min, max float64 }

func (a axis) scale(v float64, from, to float64) float64 {
	if a.max == a.min {
		return from
	}
	return from + (v-a.min)/(a.max-a.min)*(to-from)
}

// niceTicks returns about n round tick values covering [lo, hi] and the
// axis they span.
func niceTicks(lo, hi float64, n int) ([]float64, axis) {
	if hi <= lo {
		hi = lo + 1
	}
	step := niceNum((hi-lo)/float64(n), true)
	lo = math.Floor(lo/step) * step
	hi = math.Ceil(hi/step) * step
	var ticks []float64
	for v := lo; v <= hi+step/2; v += step {
		ticks = append(ticks, v)
	}
	return ticks, axis{lo, hi}
}

func niceNum(x float64, round bool) float64 {
	exp := math.Floor(math.Log10(x))
	f := x / math.Pow(10, exp)
	var nf float64
	switch {
	case round && f < 1.5, !round && f <= 1:
		nf = 1
	case round && f < 3, !round && f <= 2:
		nf = 2
	case round && f < 7, !round && f <= 5:
		nf = 5
	default:
		nf = 10
	}
	return nf * math.Pow(10, exp)
}

func tickLabel(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// frame draws the axes, grid and labels of a chart and returns the SVG
// opening, with x and y mapping data to pixels.
func frame(b *strings.Builder, xt, yt []float64, xa, ya axis, xLabel, yLabel string, xTickLabels []string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="11">`,
		chartW, chartH, chartW, chartH)
	x0, x1, y0, y1 := float64(padL), float64(chartW-padR), float64(chartH-padBot), float64(padTop)
	for _, v := range yt {
		y := ya.scale(v, y0, y1)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`, x0, y, x1, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`, x0-6, y, esc(tickLabel(v)))
	}
	for i, v := range xt {
		x := xa.scale(v, x0, x1)
		label := tickLabel(v)
		if xTickLabels != nil {
			label = xTickLabels[i]
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`, x, y0, x, y0+4)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x, y0+16, esc(label))
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, x0, y0, x1, y0)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, x0, y0, x0, y1)
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, (x0+x1)/2, chartH-6, esc(xLabel))
	fmt.Fprintf(b, `<text x="14" y="%.1f" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>`, (y0+y1)/2, (y0+y1)/2, esc(yLabel))
}

func legend(b *strings.Builder, names, colors []string) {
	x := float64(padL + 10)
	for i, n := range names {
		fmt.Fprintf(b, `<rect x="%.1f" y="4" width="10" height="10" fill="%s"/>`, x, colors[i])
		fmt.Fprintf(b, `<text x="%.1f" y="13">%s</text>`, x+14, esc(n))
		x += 24 + 7*float64(len(n))
	}
}

// lineChart draws series over shared axes; yMin/yMax fix the y range when
// yMax > yMin.
func lineChart(ss []series, xLabel, yLabel string, yMin, yMax float64, integerX bool) template.HTML {
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, p := range s.points {
			xlo, xhi = math.Min(xlo, p[0]), math.Max(xhi, p[0])
			ylo, yhi = math.Min(ylo, p[1]), math.Max(yhi, p[1])
		}
	}
	if math.IsInf(xlo, 1) {
		return ""
	}
	if yMax > yMin {
		ylo, yhi = yMin, yMax
	} else {
		ylo = math.Min(0, ylo)
	}
	xt, xa := niceTicks(xlo, xhi, 8)
	if integerX {
		xt, xa = intTicks(xlo, xhi)
	}
	yt, ya := niceTicks(ylo, yhi, 5)
	var b strings.Builder
	frame(&b, xt, yt, xa, ya, xLabel, yLabel, nil)
	x0, x1, y0, y1 := float64(padL), float64(chartW-padR), float64(chartH-padBot), float64(padTop)
	var names, colors []string
	for _, s := range ss {
		var pts []string
		for i, p := range s.points {
			x, y := xa.scale(p[0], x0, x1), ya.scale(p[1], y0, y1)
			if s.step && i > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, ya.scale(s.points[i-1][1], y0, y1)))
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		width := s.width
		if width == 0 {
			width = 2
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%g" points="%s"/>`, s.color, width, strings.Join(pts, " "))
		if !s.step && len(s.points) <= 60 {
			for _, p := range s.points {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, xa.scale(p[0], x0, x1), ya.scale(p[1], y0, y1), s.color)
			}
		}
		names, colors = append(names, s.name), append(colors, s.color)
	}
	legend(&b, names, colors)
	b.WriteString("</svg>")
	return template.HTML(b.String()) // #nosec: built from numbers and escaped labels
}

// intTicks returns integer ticks (at most ~12) for category-like x values.
func intTicks(lo, hi float64) ([]float64, axis) {
	step := math.Max(1, math.Ceil((hi-lo+1)/12))
	var t []float64
	for v := lo; v <= hi; v += step {
		t = append(t, v)
	}
	return t, axis{lo - 0.5, hi + 0.5}
}

// barChart draws grouped bars, one group per category.
func barChart(categories []string, groups []bars, xLabel, yLabel string, yMax float64) template.HTML {
	if len(categories) == 0 {
		return ""
	}
	yt, ya := niceTicks(0, yMax, 5)
	xa := axis{0, float64(len(categories))}
	xt := make([]float64, len(categories))
	for i := range xt {
		xt[i] = float64(i) + 0.5
	}
	labels := categories
	if len(categories) > 24 { // thin the labels
		labels = make([]string, len(categories))
		every := (len(categories) + 23) / 24
		for i := range categories {
			if i%every == 0 {
				labels[i] = categories[i]
			}
		}
	}
	var b strings.Builder
	frame(&b, xt, yt, xa, ya, xLabel, yLabel, labels)
	x0, x1, y0, y1 := float64(padL), float64(chartW-padR), float64(chartH-padBot), float64(padTop)
	slot := (x1 - x0) / float64(len(categories))
	bw := slot * 0.8 / float64(len(groups))
	var names, colors []string
	for g, grp := range groups {
		for i, v := range grp.values {
			if math.IsNaN(v) {
				continue
			}
			x := x0 + slot*float64(i) + slot*0.1 + bw*float64(g)
			y := ya.scale(v, y0, y1)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.3f</title></rect>`,
				x, y, math.Max(bw-1, 1), y0-y, grp.color, esc(grp.name), esc(categories[i]), v)
		}
		names, colors = append(names, grp.name), append(colors, grp.color)
	}
	legend(&b, names, colors)
	b.WriteString("</svg>")
	return template.HTML(b.String()) // #nosec: built from numbers and escaped labels
}

func esc(s string) string { return template.HTMLEscapeString(s) }
