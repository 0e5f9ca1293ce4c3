package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/tests/loadgen"
	"github.com/duet-serve/duet/tests/replay"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/duet-serve/duet/workers/sim"
	"github.com/duet-serve/duet/workers/sim/model"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

// replayFlags are duet replay's own flags; the workload flags are duet
// bench's.
type replayFlags struct {
	bench    benchFlags
	policies []string
	numCtx   []int
	numGen   []int
	ctxKV    []int
	genKV    []int
	speedup  float64
	overhead time.Duration
	kvEvents bool
	window   time.Duration
}

func newReplayCmd(a *app) *cobra.Command {
	f := &replayFlags{bench: benchFlags{cfg: loadgen.Defaults()}}
	cmd := &cobra.Command{
		Use:   "replay [--config FILE] [workload flags] [--policy a,b] [--num-ctx N,...] [--ctx-kv-blocks N,...]",
		Short: "replay a workload through duet's router over a modelled fleet, in simulated time",
		Long: `Runs every request of a workload through the router duet serve uses (the
router: section of --config: policy, session table, prefix index, leases,
spill rules) against a modelled fleet: each worker is the simulator's KV cache
and timing model (the sim: section; time_scale is ignored: time is simulated),
so an hour of traffic replays in seconds. The workload flags are duet bench's:
a synthetic multi-turn workload (--num-sessions ...) or --input-file with
--custom-dataset-type multi_turn, single_turn or mooncake_trace (each hash id
is a block of --isl-block-size tokens; timestamps are followed unless
--concurrency is set, faster with --speedup).

For each policy (--policy, comma-separated; default the config's) and each
fleet size and cache size listed, it writes duet bench's export files and
report to --artifact-dir/<run> (default artifacts/replay), then prints the runs side by side (as duet
bench compare does) and a table of the replay's own numbers: ctx prefill
imbalance (max/mean of the tokens each ctx worker computed, over the run and
per minute), spills and affinity breaks. TTFT is modelled: worker time only,
no network and no duet overhead.`,
		Example: `  duet replay --num-sessions 96 --session-turns-mean 6 --session-turn-delay-mean 1000 \
    --shared-system-prompt-length 1000 --user-context-prompt-length 3000 --isl 200 --osl 100 \
    --concurrency 30 --random-seed 1 --policy round-robin,least-load,conversation --ctx-kv-blocks 1024
  duet replay --input-file conversation_trace.jsonl --custom-dataset-type mooncake_trace \
    --policy kv-aware,conversation --num-ctx 4 --num-gen 4 --ctx-kv-blocks 20000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runWith(cmd, nil, func(_ context.Context, cfg Config, _ *zap.Logger) error {
				return runReplay(cmd, f, cfg)
			})
		},
	}
	fs := cmd.Flags()
	defineBenchFlags(fs, &f.bench)
	for _, name := range []string{"url", "url-strategy", "endpoint", "streaming", "header", "api-key", "no-session-affinity-header",
		"request-timeout-seconds", "use-legacy-max-tokens", "extra-inputs", "request-rate", "request-rate-mode", "user-centric-rate",
		"num-users", "request-count", "benchmark-duration", "benchmark-grace-period", "warmup-request-count", "no-progress"} {
		_ = fs.MarkHidden(name) // accepted for a bench command line pasted as is; no meaning in a replay
	}
	fs.StringSliceVar(&f.policies, "policy", nil, "routing policies to replay, comma-separated (default: router.policy)")
	fs.IntSliceVar(&f.numCtx, "num-ctx", nil, "ctx workers, comma-separated for a sweep (default: fleet.context's count)")
	fs.IntSliceVar(&f.numGen, "num-gen", nil, "gen workers, comma-separated for a sweep (default: fleet.generation's count)")
	fs.IntSliceVar(&f.ctxKV, "ctx-kv-blocks", nil, "ctx KV cache in blocks, comma-separated for a sweep (default: sim.kv_capacity_blocks)")
	fs.IntSliceVar(&f.genKV, "gen-kv-blocks", nil, "gen KV cache in blocks, comma-separated for a sweep (default: sim.kv_capacity_blocks)")
	fs.Float64Var(&f.speedup, "speedup", 1, "with timestamps: replay this many times faster than recorded")
	fs.DurationVar(&f.window, "oracle-window", 10*time.Minute, "memory of the windowed oracle: a block counts when a prompt held it at most this long ago")
	fs.BoolVar(&f.kvEvents, "kv-events", false, "the modelled workers publish KV cache events and the router indexes them (as with fleet kv_events); default: the router estimates each cache from what it sent")
	fs.DurationVar(&f.overhead, "serving-overhead", 0, "latency the serving path adds to each request outside the workers (HTTP, tokenization, relay); measure it on your machine (docs/benchmarks.md)")
	fs.Lookup("artifact-dir").Usage = "directory for the runs' exports, one subdirectory per run (default artifacts/replay)"
	return cmd
}

// replayPoint is one run of a sweep.
type replayPoint struct {
	policy             string
	nCtx, nGen         int
	ctxBlocks, genBlks int
}

func (p replayPoint) label(sweep bool) string {
	if !sweep {
		return p.policy
	}
	return fmt.Sprintf("%s-c%d-g%d-kv%d", p.policy, p.nCtx, p.nGen, p.ctxBlocks)
}

func runReplay(cmd *cobra.Command, f *replayFlags, cfg Config) error {
	if f.bench.cfg.Model == "" {
		f.bench.cfg.Model = "replay"
	}
	// profile_export is replay's own dataset type: duet bench's validation
	// does not know it.
	profile, dir := f.bench.cfg.DatasetType == replay.ProfileExport, f.bench.cfg.InputFile
	if profile {
		f.bench.cfg.DatasetType, f.bench.cfg.InputFile = "", ""
	}
	wl, err := f.bench.config(cmd.Flags())
	if err != nil {
		return err
	}
	if profile {
		wl.DatasetType, wl.InputFile = replay.ProfileExport, dir
	}
	points, err := f.points(cfg)
	if err != nil {
		return err
	}
	tok, err := benchTokenizer(f.bench.tokenizer, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	if err := loadgen.CheckTemplate(tok, wl.EndpointType); err != nil {
		return err
	}
	out, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	sweep := len(points) > len(f.policyList(cfg))
	var runs []*loadgen.RunSummary
	var rows []replayRow
	for _, p := range points {
		start := time.Now()
		sessions, wlc, err := replaySessions(wl, tok)
		if err != nil {
			return err
		}
		rc := replayConfig(cfg, wlc, p, f.speedup)
		rc.ServingOverhead, rc.OracleWindow, rc.KVEvents = f.overhead, f.window, f.kvEvents
		res, err := replay.Run(rc, sessions)
		if err != nil {
			return err
		}
		wall := time.Since(start)
		label := p.label(sweep)
		if f.bench.label != "" {
			label = f.bench.label + "-" + label
		}
		dir := filepath.Join(f.artifactRoot(), label)
		sum := loadgen.SummarizeRecords(res.Records)
		if _, err := loadgen.WriteArtifacts(dir, &loadgen.Result{Config: wlc, Records: res.Records}, sum,
			loadgen.RunInfo{Label: label, CLICommand: commandLine(), Version: versionString()}); err != nil {
			return err
		}
		run, err := loadgen.ReadRunSummary(dir)
		if err != nil {
			return err
		}
		runs = append(runs, run)
		rows = append(rows, replayRow{label: label, res: res, wall: wall})
		fmt.Fprintf(stderr, "duet replay: %s: %d requests, %s simulated in %s -> %s\n", label, len(res.Records),
			res.Duration.Round(time.Second), wall.Round(time.Millisecond), dir)
	}
	loadgen.Compare(out, runs, false)
	fmt.Fprintln(out)
	printReplayRows(out, rows)
	return nil
}

// artifactRoot is --artifact-dir, or artifacts/replay.
func (f *replayFlags) artifactRoot() string {
	if f.bench.artifactDir != "" {
		return f.bench.artifactDir
	}
	return filepath.Join("artifacts", "replay")
}

// policyList is --policy or the config's policy.
func (f *replayFlags) policyList(cfg Config) []string {
	if len(f.policies) == 0 {
		return []string{cfg.Router.Policy}
	}
	return f.policies
}

// points is the sweep: every policy × fleet size × cache size listed.
func (f *replayFlags) points(cfg Config) ([]replayPoint, error) {
	orDefault := func(xs []int, def int) []int {
		if len(xs) == 0 {
			return []int{def}
		}
		return xs
	}
	nCtx := orDefault(f.numCtx, poolSize(cfg.Fleet.Context.Count, len(cfg.Fleet.Context.URLs)))
	nGen := orDefault(f.numGen, poolSize(cfg.Fleet.Generation.Count, len(cfg.Fleet.Generation.URLs)))
	ctxKV, genKV := orDefault(f.ctxKV, cfg.Sim.KVCapacityBlocks), orDefault(f.genKV, cfg.Sim.KVCapacityBlocks)
	var out []replayPoint
	for _, pol := range f.policyList(cfg) {
		if !slices.Contains(router.PolicyNames, pol) {
			return nil, fmt.Errorf("--policy: unknown policy %q (valid: %s)", pol, strings.Join(router.PolicyNames, ", "))
		}
		for _, c := range nCtx {
			for _, g := range nGen {
				for _, ck := range ctxKV {
					for _, gk := range genKV {
						if c < 1 || g < 1 || ck < 1 || gk < 1 {
							return nil, fmt.Errorf("--num-ctx, --num-gen, --ctx-kv-blocks and --gen-kv-blocks must be >= 1")
						}
						out = append(out, replayPoint{policy: pol, nCtx: c, nGen: g, ctxBlocks: ck, genBlks: gk})
					}
				}
			}
		}
	}
	return out, nil
}

// poolSize is a fleet pool's worker count as duet serve would launch it.
func poolSize(count, urls int) int {
	switch {
	case count > 0:
		return count
	case urls > 0:
		return urls
	}
	return 2 // workers.DefaultCount
}

// replaySessions builds a fresh copy of the workload's sessions (a replay
// consumes them: each keeps its transcript).
func replaySessions(wl loadgen.Config, tok *tokenizer.Tokenizer) ([]replay.Session, loadgen.Config, error) {
	if wl.DatasetType == replay.ProfileExport {
		return profileSessions(wl, tok)
	}
	if wl.DatasetType == loadgen.DatasetMooncake && wl.InputFile != "" {
		f, err := os.Open(wl.InputFile)
		if err != nil {
			return nil, wl, err
		}
		defer f.Close()
		sessions, err := replay.MooncakeSessions(f, wl.HashBlockSize)
		if err != nil {
			return nil, wl, fmt.Errorf("--input-file: %w", err)
		}
		if wl.NumSessions > 0 && wl.NumSessions < len(sessions) {
			sessions = sessions[:wl.NumSessions]
		}
		if wl.Concurrency == 0 {
			wl.FixedSchedule = true
		}
		return sessions, wl, nil
	}
	corpus, err := loadgen.NewCorpus(tok)
	if err != nil {
		return nil, wl, err
	}
	wlc, sessions, err := loadgen.Workload(wl, corpus)
	if err != nil {
		return nil, wl, err
	}
	return replay.ChatSessions(sessions, tok, corpus, wlc.EndpointType, wlc.Seed), wlc, nil
}

// profileSessions replays a finished run's artifact directory (--input-file
// DIR --custom-dataset-type profile_export): on its own timestamps unless
// --concurrency is given.
func profileSessions(wl loadgen.Config, tok *tokenizer.Tokenizer) ([]replay.Session, loadgen.Config, error) {
	sessions, err := replay.ProfileSessions(wl.InputFile)
	if err != nil {
		return nil, wl, fmt.Errorf("--input-file: %w", err)
	}
	if wl.NumSessions > 0 && wl.NumSessions < len(sessions) {
		sessions = sessions[:wl.NumSessions]
	}
	wl.FixedSchedule = wl.Concurrency == 0
	corpus, err := loadgen.NewCorpus(tok)
	if err != nil {
		return nil, wl, err
	}
	return replay.ChatSessions(sessions, tok, corpus, wl.EndpointType, wl.Seed), wl, nil
}

// replayConfig is one sweep point's replay configuration. The modelled
// workers report their KV cache size to the router, as vLLM and SGLang
// workers do, unless the config sets router.kv_blocks_per_worker.
func replayConfig(cfg Config, wl loadgen.Config, p replayPoint, speedup float64) replay.Config {
	rc := cfg.Router
	rc.Policy = p.policy
	worker := func(blocks int) replay.WorkerModel {
		s := cfg.Sim
		return replay.WorkerModel{KVCapacityBlocks: blocks, BlockSize: s.BlockSize, MaxNumSeqs: s.MaxNumSeqs, Timing: simTiming(s)}
	}
	return replay.Config{Router: rc, Fleet: replay.Fleet{NCtx: p.nCtx, NGen: p.nGen, Ctx: worker(p.ctxBlocks), Gen: worker(p.genBlks)},
		Concurrency: max(wl.Concurrency, 1), FixedSchedule: wl.FixedSchedule, Speedup: speedup,
		NoSessionIDs: wl.SessionHeader == "none", DefaultMaxTokens: cfg.Sim.DefaultMaxTokens, OracleBlockSize: wl.OracleBlockSize}
}

// simTiming is the sim: section's timing model in real time (time_scale
// does not apply: a replay's time is simulated).
func simTiming(s sim.Config) model.Timing {
	return model.Timing{Scale: 1, PrefillRate: s.PrefillTokensPerSec, PrefillOverhead: s.PrefillOverhead, ITLBase: s.ITLBase,
		ITLPerSeq: s.ITLPerSeq, TransferRate: s.KVTransferTokensPerSec, TransferOverhead: s.KVTransferOverhead}
}

type replayRow struct {
	label string
	res   *replay.Result
	wall  time.Duration
}

func printReplayRows(w io.Writer, rows []replayRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\toracle (window)\toracle (pooled cache)\tctx imbalance\tper minute\tindex exact\tindex error p99\troutes\tspills\taffinity breaks\tsimulated\twall\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t%s\t%s\t%s\t%s\t%s\t\n", r.label, r.res.WindowOracleRatio, r.res.PooledOracleRatio, r.res.Imbalance, r.res.MinuteImbalance,
			r.res.IndexExact, r.res.IndexErrorP99,
			counts(r.res.Routes), counts(r.res.Stats.Spills()), counts(r.res.Stats.Breaks()), r.res.Duration.Round(time.Second), r.wall.Round(time.Millisecond))
	}
	_ = tw.Flush()
}

// counts renders router counters as reason=n, or "-".
func counts(cs []router.Count) string {
	if len(cs) == 0 {
		return "-"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s=%d", c.Reason, c.Value)
	}
	return strings.Join(parts, " ")
}
