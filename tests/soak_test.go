//go:build soak

package tests

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The chaos and soak suite (issue 12), `make soak`: a real `duet serve` over
// a fleet of `duet sim` workers per scenario, abused the way production
// abuses a proxy, then checked for what must never happen: a client left
// hanging, a lease or admission slot left charged, goroutines that do not
// come back, duet itself exiting. It needs the build tag soak, so `make
// test` neither builds nor runs it, and it runs without the race detector
// (see duetRace). Sizes come from the environment (soakEnv).

func init() { duetRace = false }

// TestSoak runs every scenario in turn and prints one summary table.
func TestSoak(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(*testing.T, *soakRow)
	}{
		{"sigkill-workers", soakKill},
		{"vanishing-clients", soakVanish},
		{"slow-loris", soakLoris},
		{"concurrent-streams", soakStreams},
		{"faulty-workers", soakFaults},
		{"chaos-bench", soakChaos},
	}
	var rows []*soakRow
	start := time.Now()
	defer func() { printSoakTable(rows, time.Since(start)) }()
	for _, sc := range scenarios {
		row := &soakRow{name: sc.name}
		rows = append(rows, row)
		began := time.Now()
		row.failed = !t.Run(sc.name, func(t *testing.T) {
			row.started = true
			sc.run(t, row)
		})
		row.took = time.Since(began)
	}
}

// soakRow is one scenario's line of the summary table.
type soakRow struct {
	name    string
	started bool // the scenario was selected (-run) and began
	ran     bool // it got as far as its final checks
	failed  bool
	took    time.Duration
	counts  [numOutcomes]int64
	leases  float64 // live leases plus their token load, at the end
	slots   float64 // admission slots held plus requests queued, at the end
	seqs    float64 // sequences the workers still run or queue, at the end
	gorBase float64 // duet's goroutines after warm-up
	gorEnd  float64
	rssBase float64 // duet's resident memory after warm-up, bytes
	rssPeak float64
	rssEnd  float64
	restart int // duet restarts: its process exited or was replaced
	// migrated counts the streams duet continued on another gen worker;
	// notMigrated the failed streams it did not, by "failure: outcome"
	// (duet_migrations_total).
	migrated    float64
	notMigrated map[string]float64
	notes       []string
}

func (r *soakRow) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *soakRow) requests() int64 {
	var n int64
	for _, c := range r.counts {
		n += c
	}
	return n
}

// printSoakTable writes the summary as a Markdown table on stdout.
func printSoakTable(rows []*soakRow, took time.Duration) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nduet soak summary (%s, %d CPUs)\n\n", took.Round(time.Second), runtime.NumCPU())
	b.WriteString("| scenario | requests | answered fully | error event | error status | client left | closed, no answer | broken | hung | streams migrated / not | leases / slots left | worker seqs left | goroutines before → after | RSS MiB before → peak → after | duet restarts | time |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		if !r.started {
			continue
		}
		name := r.name
		if r.failed {
			name += " **FAILED**"
		}
		if !r.ran {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | — | — | — | — | — | — | %s |\n", name,
				num(r.requests()), num(r.counts[outFull]), num(r.counts[outErrorEvent]), num(r.counts[outErrorStatus]),
				num(r.counts[outClientLeft]), num(r.counts[outClosed]), num(r.counts[outBroken]), num(r.counts[outHung]),
				r.took.Round(time.Second))
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %g / %g | %g | %g → %g | %.0f → %.0f → %.0f | %d | %s |\n", name,
			num(r.requests()), num(r.counts[outFull]), num(r.counts[outErrorEvent]), num(r.counts[outErrorStatus]),
			num(r.counts[outClientLeft]), num(r.counts[outClosed]), num(r.counts[outBroken]), num(r.counts[outHung]),
			num(int64(r.migrated)), num(int64(sum(r.notMigrated))), r.leases, r.slots, r.seqs, r.gorBase, r.gorEnd, r.rssBase/(1<<20), r.rssPeak/(1<<20), r.rssEnd/(1<<20),
			r.restart, r.took.Round(time.Second))
	}
	b.WriteString("\n")
	for _, r := range rows {
		if len(r.notMigrated) > 0 {
			r.note("not migrated (failure: why): %s", formatCounts(r.notMigrated))
		}
		if len(r.notes) > 0 {
			fmt.Fprintf(&b, "- **%s**: %s.\n", r.name, strings.Join(r.notes, "; "))
		}
	}
	fmt.Print(b.String())
}

// sum adds the values of m.
func sum(m map[string]float64) float64 {
	total := 0.0
	for _, v := range m {
		total += v
	}
	return total
}

// num writes n with thousands separators.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// soakEnv reads an integer size from the environment, else def.
func soakEnv(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s: must be a positive integer, got %q", name, v)
	}
	return n
}

// soakEnvDuration reads a duration from the environment, else def.
func soakEnvDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s: must be a positive duration, got %q", name, v)
	}
	return d
}

// formatCounts writes m as "key value, ..." in key order.
func formatCounts[V int | float64 | time.Duration](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		var v any = m[k]
		switch x := v.(type) {
		case float64:
			v = num(int64(x))
		case int:
			v = num(int64(x))
		}
		parts = append(parts, fmt.Sprint(k, " ", v))
	}
	return strings.Join(parts, ", ")
}
