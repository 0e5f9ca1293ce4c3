package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/duet-serve/duet/tests/loadgen"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// benchFlags are duet bench's flags that need parsing before they fit
// loadgen.Config.
type benchFlags struct {
	cfg         loadgen.Config
	urls        []string
	headers     []string
	extras      []string
	timeoutSecs float64
	durationSec float64
	graceSecs   float64
	seed        uint64
	tokenizer   string
	artifactDir string
	label       string
	noProgress  bool
}

func newBenchCmd(_ *app) *cobra.Command {
	f := &benchFlags{cfg: loadgen.Defaults()}
	cmd := &cobra.Command{
		Use:   "bench --model NAME [--url URL] [flags]",
		Short: "aiperf-compatible multi-turn load generator: TTFT by turn, KV cache hit ratio vs an oracle",
		Long: `Runs a benchmark against an OpenAI-compatible server the way aiperf's multi-turn
mode does, with aiperf's flags, metric definitions and export files
(profile_export_aiperf.json/.csv, profile_export.jsonl, inputs.json) plus an
offline HTML report (report.html) in --artifact-dir. Beyond aiperf it reports
TTFT by turn index, the server's cached tokens per turn, the cache hit ratio,
the oracle hit ratio (what an ideal router with an unlimited cache could
reuse) and routing efficiency = hit / oracle.

Synthetic sessions are cut from an embedded public-domain corpus; aiperf
multi_turn, single_turn and mooncake_trace JSONL files work with --input-file.
--concurrency counts sessions in flight (a session keeps its slot through
think time). Every turn of a session carries the same X-Correlation-ID (and
X-Session-Affinity); every request a fresh X-Request-ID.

  duet bench compare DIR...   prints finished runs side by side`,
		Example: `  duet bench -m meta-llama/Llama-3.1-8B-Instruct --url 127.0.0.1:8000 --streaming \
    --num-sessions 64 --session-turns-mean 5 --session-turn-delay-mean 500 \
    --shared-system-prompt-length 1000 --isl 200 --osl 64 --extra-inputs ignore_eos:true \
    --concurrency 16 --random-seed 1 --artifact-dir artifacts/least-load`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, f)
		},
	}
	defineBenchFlags(cmd.Flags(), f)
	cmd.AddCommand(newBenchCompareCmd())
	return cmd
}

// defineBenchFlags registers aiperf's flag names; hidden aliases are
// aiperf's other spellings of the same flag.
func defineBenchFlags(fs *pflag.FlagSet, f *benchFlags) {
	c := &f.cfg
	alias := func(name string, define func(string)) {
		define(name)
		_ = fs.MarkHidden(name)
	}
	// Endpoint.
	fs.StringVarP(&c.Model, "model", "m", "", "model name sent in every request (required)")
	alias("model-names", func(n string) { fs.StringVar(&c.Model, n, "", "") })
	fs.StringArrayVarP(&f.urls, "url", "u", nil, "server base URL, http:// added when missing (repeatable or comma-separated; default http://localhost:8000)")
	fs.StringVar(&c.URLStrategy, "url-strategy", c.URLStrategy, "with several --url: round_robin (each session on the next URL, as aiperf) or turn_round_robin (each request on the next URL)")
	fs.StringVar(&c.EndpointType, "endpoint-type", c.EndpointType, "chat or completions")
	fs.StringVar(&c.CustomEndpoint, "endpoint", "", "request path (default /v1/chat/completions or /v1/completions)")
	alias("custom-endpoint", func(n string) { fs.StringVar(&c.CustomEndpoint, n, "", "") })
	fs.BoolVar(&c.Streaming, "streaming", false, "stream responses (SSE); TTFT, TTST and ITL exist only when streaming")
	fs.StringArrayVarP(&f.headers, "header", "H", nil, "extra header Name:Value (repeatable, or a JSON object)")
	fs.StringVar(&c.APIKey, "api-key", "", "sent as Authorization: Bearer KEY")
	fs.StringVar(&c.SessionHeader, "session-header", c.SessionHeader, `header carrying the session id on every turn ("none": no session header)`)
	fs.BoolVar(&c.NoAffinityHeader, "no-session-affinity-header", false, "do not also send "+loadgen.AffinityHeader)
	fs.Float64Var(&f.timeoutSecs, "request-timeout-seconds", c.RequestTimeout.Seconds(), "timeout of one request, body included")
	fs.BoolVar(&c.LegacyMaxTokens, "use-legacy-max-tokens", false, "send max_tokens instead of max_completion_tokens on chat")
	fs.StringArrayVar(&f.extras, "extra-inputs", nil, "extra body field key:value, JSON-typed (e.g. ignore_eos:true; repeatable, or a JSON object)")
	fs.StringVar(&f.tokenizer, "tokenizer", "cl100k_base", "tokenizer for the corpus, the token counts and the oracle: a model directory or tokenizer file (as tokenizer.source), or cl100k_base, o200k_base; other names (a hub model id) fall back to cl100k_base")

	// Workload.
	fs.IntVar(&c.NumSessions, "num-sessions", 0, "sessions to run (synthetic: also to generate)")
	alias("conversation-num", func(n string) { fs.IntVar(&c.NumSessions, n, 0, "") })
	alias("num-conversations", func(n string) { fs.IntVar(&c.NumSessions, n, 0, "") })
	fs.Float64Var(&c.TurnsMean, "session-turns-mean", c.TurnsMean, "mean turns per synthetic session")
	alias("conversation-turn-mean", func(n string) { fs.Float64Var(&c.TurnsMean, n, c.TurnsMean, "") })
	fs.Float64Var(&c.TurnsStddev, "session-turns-stddev", 0, "stddev of turns per synthetic session")
	alias("conversation-turn-stddev", func(n string) { fs.Float64Var(&c.TurnsStddev, n, 0, "") })
	fs.Float64Var(&c.TurnDelayMean, "session-turn-delay-mean", 0, "mean think time before each later turn, ms")
	alias("conversation-turn-delay-mean", func(n string) { fs.Float64Var(&c.TurnDelayMean, n, 0, "") })
	fs.Float64Var(&c.TurnDelayStddev, "session-turn-delay-stddev", 0, "stddev of the think time, ms")
	alias("conversation-turn-delay-stddev", func(n string) { fs.Float64Var(&c.TurnDelayStddev, n, 0, "") })
	fs.Float64Var(&c.TurnDelayRatio, "session-delay-ratio", c.TurnDelayRatio, "multiplier for the synthetic think times (a file's delays are used as written)")
	alias("conversation-turn-delay-ratio", func(n string) { fs.Float64Var(&c.TurnDelayRatio, n, c.TurnDelayRatio, "") })
	fs.IntVar(&c.ISL, "isl", c.ISL, "mean new user tokens per synthetic turn")
	alias("synthetic-input-tokens-mean", func(n string) { fs.IntVar(&c.ISL, n, c.ISL, "") })
	alias("prompt-input-tokens-mean", func(n string) { fs.IntVar(&c.ISL, n, c.ISL, "") })
	fs.Float64Var(&c.ISLStddev, "isl-stddev", 0, "stddev of the new user tokens per turn")
	alias("synthetic-input-tokens-stddev", func(n string) { fs.Float64Var(&c.ISLStddev, n, 0, "") })
	alias("prompt-input-tokens-stddev", func(n string) { fs.Float64Var(&c.ISLStddev, n, 0, "") })
	fs.IntVar(&c.OSL, "osl", 0, "mean max_completion_tokens per turn (0: not sent)")
	alias("output-tokens-mean", func(n string) { fs.IntVar(&c.OSL, n, 0, "") })
	alias("prompt-output-tokens-mean", func(n string) { fs.IntVar(&c.OSL, n, 0, "") })
	fs.Float64Var(&c.OSLStddev, "osl-stddev", 0, "stddev of max_completion_tokens")
	alias("output-tokens-stddev", func(n string) { fs.Float64Var(&c.OSLStddev, n, 0, "") })
	alias("prompt-output-tokens-stddev", func(n string) { fs.Float64Var(&c.OSLStddev, n, 0, "") })
	fs.IntVar(&c.SharedSystemPromptLength, "shared-system-prompt-length", 0, "tokens of a system prompt shared by all sessions")
	fs.IntVar(&c.UserContextPromptLength, "user-context-prompt-length", 0, "tokens of a context prompt unique to each session")
	fs.IntVar(&c.PrefixPromptPoolSize, "prefix-prompt-pool-size", 0, "prefix prompts (documents) in a pool; each session's first turn starts with one picked at random")
	alias("prompt-prefix-pool-size", func(n string) { fs.IntVar(&c.PrefixPromptPoolSize, n, 0, "") })
	alias("num-prefix-prompts", func(n string) { fs.IntVar(&c.PrefixPromptPoolSize, n, 0, "") })
	fs.IntVar(&c.PrefixPromptLength, "prefix-prompt-length", 0, "mean tokens of each prefix prompt of the pool")
	alias("prompt-prefix-length", func(n string) { fs.IntVar(&c.PrefixPromptLength, n, 0, "") })
	fs.Float64Var(&c.PrefixPromptLengthStddev, "prefix-prompt-length-stddev", 0, "stddev of the prefix prompts' lengths (duet only; each at least 1 token)")
	fs.Float64Var(&c.PrefixPromptZipf, "prefix-prompt-zipf", 0, "Zipf exponent of the prefix prompts' popularity: prompt i picked with weight 1/(i+1)^s (duet only; 0: uniform, as aiperf)")
	fs.Uint64Var(&f.seed, "random-seed", 0, "seed of every random draw (default: from the clock, recorded in the exports)")
	fs.StringVar(&c.InputFile, "input-file", "", "aiperf JSONL dataset")
	fs.StringVar(&c.DatasetType, "custom-dataset-type", "", "dataset type: multi_turn, single_turn or mooncake_trace")
	fs.IntVar(&c.HashBlockSize, "isl-block-size", c.HashBlockSize, "tokens per mooncake hash id")
	alias("synthetic-input-tokens-block-size", func(n string) { fs.IntVar(&c.HashBlockSize, n, c.HashBlockSize, "") })
	alias("prompt-input-tokens-block-size", func(n string) { fs.IntVar(&c.HashBlockSize, n, c.HashBlockSize, "") })
	fs.BoolVar(&c.FixedSchedule, "fixed-schedule", false, "send each turn at its timestamp in --input-file")
	fs.BoolVar(&c.FixedScheduleAutoOffset, "fixed-schedule-auto-offset", false, "shift timestamps so the first is 0")

	// Load.
	fs.IntVar(&c.Concurrency, "concurrency", 0, "sessions in flight (default 1 without a rate; a ceiling with one)")
	fs.Float64Var(&c.RequestRate, "request-rate", 0, "requests per second")
	fs.StringVar(&c.ArrivalPattern, "request-rate-mode", c.ArrivalPattern, "arrivals: poisson or constant")
	alias("arrival-pattern", func(n string) { fs.StringVar(&c.ArrivalPattern, n, c.ArrivalPattern, "") })
	fs.Float64Var(&c.UserCentricRate, "user-centric-rate", 0, "total requests/s shared by --num-users users (a turn every users/rate s each)")
	fs.IntVar(&c.NumUsers, "num-users", 0, "users of --user-centric-rate")
	fs.IntVar(&c.RequestCount, "request-count", 0, "stop after this many requests")
	alias("num-requests", func(n string) { fs.IntVar(&c.RequestCount, n, 0, "") })
	fs.Float64Var(&f.durationSec, "benchmark-duration", 0, "stop sending after this many seconds")
	fs.Float64Var(&f.graceSecs, "benchmark-grace-period", c.GracePeriod.Seconds(), "seconds in-flight requests may finish after --benchmark-duration")
	fs.IntVar(&c.WarmupRequestCount, "warmup-request-count", 0, "unmeasured requests (separate synthetic sessions) before profiling")
	alias("num-warmup-requests", func(n string) { fs.IntVar(&c.WarmupRequestCount, n, 0, "") })

	// Output.
	fs.StringVar(&f.artifactDir, "artifact-dir", "", "directory for the exports (default artifacts/<model>-<endpoint>-<load>)")
	fs.StringVar(&f.label, "label", "", "name of the run in reports and compare (default: the artifact directory's name)")
	fs.IntVar(&c.OracleBlockSize, "oracle-block-size", c.OracleBlockSize, "block size of the oracle's prefix matching, tokens")
	fs.BoolVar(&f.noProgress, "no-progress", false, "no progress bar")
}

// config finishes the flags into a loadgen.Config.
func (f *benchFlags) config(fs *pflag.FlagSet) (loadgen.Config, error) {
	c := f.cfg
	if len(f.urls) > 0 {
		c.URLs = nil
		for _, u := range f.urls {
			c.URLs = append(c.URLs, strings.Split(u, ",")...)
		}
	}
	for _, h := range f.headers {
		hs, err := loadgen.ParseHeaders(h)
		if err != nil {
			return c, err
		}
		c.Headers = append(c.Headers, hs...)
	}
	for _, e := range f.extras {
		es, err := loadgen.ParseExtraInputs(e)
		if err != nil {
			return c, err
		}
		c.ExtraInputs = append(c.ExtraInputs, es...)
	}
	c.RequestTimeout = seconds(f.timeoutSecs)
	c.Duration = seconds(f.durationSec)
	c.GracePeriod = seconds(f.graceSecs)
	c.Seed, c.SeedSet = f.seed, fs.Changed("random-seed")
	return c, c.Validate()
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func runBench(cmd *cobra.Command, f *benchFlags) error {
	cfg, err := f.config(cmd.Flags())
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	tok, err := benchTokenizer(f.tokenizer, stderr)
	if err != nil {
		return err
	}
	dir := f.artifactDir
	if dir == "" {
		dir = defaultArtifactDir(cfg)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	opts := loadgen.Options{Tokenizer: tok}
	if !f.noProgress {
		opts.Progress, opts.ProgressTTY = stderr, isTerminal(stderr)
	}
	fmt.Fprintf(stderr, "duet bench: %s %s against %s\n", cfg.Model, cfg.EndpointType, strings.Join(cfg.URLs, ", "))
	res, err := loadgen.Run(ctx, cfg, opts)
	stop() // a second Ctrl-C while the exports are written kills the process
	if err != nil {
		return err
	}
	sum := loadgen.SummarizeRecords(res.Records)
	out := cmd.OutOrStdout()
	loadgen.PrintSummary(out, sum)
	paths, err := loadgen.WriteArtifacts(dir, res, sum, loadgen.RunInfo{Label: f.label, CLICommand: commandLine(), Version: versionString()})
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	for _, p := range paths {
		fmt.Fprintf(out, "%-30s %s\n", filepath.Base(p)+":", p)
	}
	if res.Cancelled {
		fmt.Fprintln(stderr, "duet bench: interrupted; the exports cover the requests measured so far")
	}
	if m := sum.Metric("request_count"); m != nil && *m.Value == 0 {
		return errors.New("bench: no request succeeded")
	}
	return nil
}

// defaultArtifactDir names the run as aiperf does: model, endpoint, load.
func defaultArtifactDir(c loadgen.Config) string {
	load := fmt.Sprintf("concurrency%d", max(c.Concurrency, 1))
	switch {
	case c.FixedSchedule:
		load = "fixed_schedule"
	case c.UserCentricRate > 0:
		load = "user_centric" + strconv.FormatFloat(c.UserCentricRate, 'g', -1, 64)
	case c.RequestRate > 0:
		load = "request_rate" + strconv.FormatFloat(c.RequestRate, 'g', -1, 64)
	}
	model := strings.NewReplacer("/", "_", ":", "_").Replace(c.Model)
	return filepath.Join("artifacts", fmt.Sprintf("%s-openai-%s-%s", model, c.EndpointType, load))
}

// commandLine is how this process was started, quoted for a shell, with
// its secrets redacted (loadgen.RedactArgs).
func commandLine() string {
	parts := []string{"duet"}
	for _, a := range loadgen.RedactArgs(os.Args[1:]) {
		if a == "" || strings.ContainsAny(a, " \t\"'$\\{}*?") {
			a = strconv.Quote(a)
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func newBenchCompareCmd() *cobra.Command {
	var markdown bool
	cmd := &cobra.Command{
		Use:   "compare DIR...",
		Short: "print finished duet bench (or aiperf) runs side by side",
		Long: `Reads profile_export_aiperf.json from each artifact directory and prints the
key numbers side by side: TTFT overall, on the first turn and on later turns,
ITL, latency, cache hit ratio, oracle hit ratio, routing efficiency and
throughput. Runs with the same --label (repeats of one configuration) are
merged into one column of medians.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var runs []*loadgen.RunSummary
			for _, dir := range args {
				r, err := loadgen.ReadRunSummary(dir)
				if err != nil {
					return err
				}
				runs = append(runs, r)
			}
			loadgen.Compare(cmd.OutOrStdout(), runs, markdown)
			return nil
		},
	}
	cmd.Flags().BoolVar(&markdown, "markdown", false, "print a Markdown table")
	return cmd
}

// benchTokenizer returns the tokenizer --tokenizer names: a built-in
// encoding, or a local model directory or tokenizer file. aiperf's
// --tokenizer also takes a Hugging Face hub id; duet downloads nothing, so
// a name that is neither falls back to cl100k_base with a warning.
func benchTokenizer(name string, stderr io.Writer) (*tokenizer.Tokenizer, error) {
	cfg := tokenizer.Config{Encoding: "cl100k_base", MessageCacheSize: 1 << 16}
	switch _, statErr := os.Stat(name); {
	case slices.Contains(tokenizer.Encodings, name):
		cfg.Encoding = name
	case statErr == nil:
		cfg.Source = name
	default:
		fmt.Fprintf(stderr, "duet: --tokenizer %q is neither a built-in encoding (%s) nor a local model directory or file; using cl100k_base\n",
			name, strings.Join(tokenizer.Encodings, ", "))
	}
	return tokenizer.New(cfg)
}
