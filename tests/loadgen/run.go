package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/duet-serve/duet/tokenizer"
)

// Options are Run's dependencies.
type Options struct {
	// Tokenizer renders and tokenizes prompts for the oracle and cuts the
	// corpus (required; use the server's encoding).
	Tokenizer *tokenizer.Tokenizer
	// Corpus supplies synthetic text (nil: NewCorpus(Tokenizer)).
	Corpus *Corpus
	// HTTPClient sends the requests (nil: a keep-alive transport sized for
	// the load).
	HTTPClient *http.Client
	// Progress receives a progress bar (nil: none); ProgressTTY redraws one
	// line with \r instead of printing a line every ProgressInterval
	// (default 5s, 200ms on a TTY).
	Progress         io.Writer
	ProgressTTY      bool
	ProgressInterval time.Duration
	// Now is the clock of the run's schedules, stop conditions and record
	// times (nil: time.Now). Config.RequestTimeout (a context deadline) and
	// the progress bar's redraw interval stay on the real clock.
	Now func() time.Time
	// AfterFunc runs f in its own goroutine after d on the same clock unless
	// stop is called first, and stop reports whether it prevented the call,
	// like time.AfterFunc (nil: time.AfterFunc). Tests inject a fake clock.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
}

// Result is a finished run.
type Result struct {
	// Config is the configuration as run: defaults applied, seed set.
	Config Config
	// Records holds every request, warm-up included, in start order.
	Records []Record
	// Sessions are the distinct sessions the profiling phase started, in
	// start order (for inputs.json).
	Sessions []*Session
	// Cancelled reports a run stopped by its context before the end.
	Cancelled bool
}

// Run executes the benchmark described by cfg: the warm-up phase, then the
// profiling phase, each until its stop condition. It returns an error only
// when the benchmark cannot start (bad configuration or input file);
// request failures are records. Cancelling ctx stops the run early and
// returns what was measured, with Cancelled set.
func Run(ctx context.Context, cfg Config, opts Options) (*Result, error) {
	if opts.Tokenizer == nil {
		return nil, errors.New("loadgen: Options.Tokenizer is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := CheckTemplate(opts.Tokenizer, cfg.EndpointType); err != nil {
		return nil, err
	}
	if !cfg.SeedSet {
		cfg.Seed, cfg.SeedSet = uint64(time.Now().UnixNano()), true
	}
	corpus := opts.Corpus
	if corpus == nil {
		var err error
		if corpus, err = NewCorpus(opts.Tokenizer); err != nil {
			return nil, err
		}
	}
	var fileSessions []*Session
	if cfg.InputFile != "" {
		var err error
		fileSessions, err = LoadInputFile(cfg.InputFile, cfg.DatasetType, corpus, cfg.HashBlockSize, cfg.Seed)
		if err != nil {
			return nil, err
		}
		cfg = promoteFixedSchedule(cfg, fileSessions)
	}
	cfg = cfg.withDefaults()
	if cfg.FixedSchedule {
		if err := checkTimestamps(fileSessions); err != nil {
			return nil, err
		}
	}
	clk := newRunClock(opts.Now, opts.AfterFunc)
	r := &runner{cfg: cfg, tok: opts.Tokenizer, corpus: corpus, oracle: NewOracle(cfg.OracleBlockSize),
		client: newClient(cfg, opts.HTTPClient, maxConns(cfg), clk.now), clock: clk, opts: opts}
	res := &Result{Config: cfg}
	if cfg.WarmupRequestCount > 0 {
		warm := newSynthetic(cfg, corpus, cfg.Seed, 2, 0)
		r.runPhase(ctx, PhaseWarmup, warm, cfg.WarmupRequestCount, 0, cfg.WarmupRequestCount, func(ctx context.Context, p *phase) {
			p.burst(ctx, max(1, cfg.Concurrency, cfg.NumUsers))
		})
	}
	src, total := r.profileSource(fileSessions)
	prof := r.runPhase(ctx, PhaseProfiling, src, cfg.RequestCount, cfg.Duration, total, func(ctx context.Context, p *phase) {
		switch {
		case cfg.FixedSchedule:
			p.fixed(ctx, orderByTimestamp(fileSessions, cfg.NumSessions), cfg.Concurrency, cfg.FixedScheduleAutoOffset)
		case cfg.UserCentricRate > 0:
			p.userCentric(ctx, cfg.NumUsers, cfg.UserCentricRate, cfg.Concurrency)
		case cfg.RequestRate > 0:
			p.rate(ctx, cfg.RequestRate, cfg.ArrivalPattern, cfg.Concurrency)
		default:
			p.burst(ctx, cfg.Concurrency)
		}
	})
	res.Sessions = prof.started
	res.Records = r.records
	sort.SliceStable(res.Records, func(i, j int) bool {
		a, b := &res.Records[i], &res.Records[j]
		if a.Phase != b.Phase {
			return a.Phase == PhaseWarmup
		}
		return a.Start.Before(b.Start)
	})
	res.Cancelled = ctx.Err() != nil
	return res, nil
}

// promoteFixedSchedule replays a mooncake trace with timestamps on its
// schedule when no load option was given, as aiperf does.
func promoteFixedSchedule(cfg Config, sessions []*Session) Config {
	if cfg.DatasetType == DatasetMooncake && !cfg.FixedSchedule && cfg.Concurrency == 0 &&
		cfg.RequestRate == 0 && cfg.UserCentricRate == 0 && len(sessions) > 0 && sessions[0].Turns[0].HasTimestamp {
		cfg.FixedSchedule = true
	}
	return cfg
}

func checkTimestamps(sessions []*Session) error {
	for _, s := range sessions {
		if !s.Turns[0].HasTimestamp {
			return fmt.Errorf("--fixed-schedule: session %q has no timestamp on its first turn", s.ID)
		}
	}
	return nil
}

// orderByTimestamp returns the first n sessions (all when n is 0) sorted by
// their first turn's timestamp.
func orderByTimestamp(sessions []*Session, n int) []*Session {
	out := append([]*Session(nil), sessions...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Turns[0].Timestamp < out[j].Turns[0].Timestamp })
	if n > 0 && n < len(out) {
		out = out[:n]
	}
	return out
}

// maxConns sizes the connection pool for the expected parallel streams.
func maxConns(cfg Config) int {
	return max(cfg.Concurrency, cfg.NumUsers, 64)
}

// profileSource returns the sessions of the profiling phase and the number
// of requests they make when known (0 when the run is bounded by time or
// request count only).
func (r *runner) profileSource(fileSessions []*Session) (source, int) {
	cfg := r.cfg
	total := cfg.RequestCount
	if fileSessions != nil {
		limit := cfg.NumSessions
		cycle := cfg.RequestCount > 0 || cfg.Duration > 0 || limit > len(fileSessions)
		if limit == 0 && !cycle {
			total = requests(fileSessions)
		}
		return &listSource{sessions: fileSessions, cycle: cycle, limit: limit}, total
	}
	if cfg.NumSessions > 0 {
		sessions := newSynthetic(cfg, r.corpus, cfg.Seed, 1, cfg.NumSessions).all()
		return &listSource{sessions: sessions}, requests(sessions)
	}
	return newSynthetic(cfg, r.corpus, cfg.Seed, 1, 0), total
}

// runner holds what the phases of one run share.
type runner struct {
	cfg    Config
	tok    *tokenizer.Tokenizer
	corpus *Corpus
	oracle *Oracle
	client *Client
	clock  runClock
	opts   Options

	mu      sync.Mutex // guards records
	records []Record
}
