package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// faultSettings are the fault injection knobs, as GET/POST /admin/faults
// shows and takes them.
type faultSettings struct {
	ErrorRate      float64  `json:"error_rate"`
	HangRate       float64  `json:"hang_rate"`
	HangMax        duration `json:"hang_max"`
	DieRate        float64  `json:"die_rate"`
	DieAfterTokens int      `json:"die_after_tokens"`
	SlowFactor     float64  `json:"slow_factor"`
	GarbageRate    float64  `json:"garbage_rate"`
	CutRate        float64  `json:"cut_rate"`
	StallRate      float64  `json:"stall_rate"`
	// ErrorEventRate fails a generation inside the engine after
	// die_after_tokens tokens, reported as the engine reports it
	// (enginefail.go).
	ErrorEventRate float64 `json:"error_event_rate"`
	// KVPullFailRate fails the KV pull of a generation request that carries
	// a KV handle, reported as the engine reports it; the context worker
	// keeps its pin until kv_transfer_timeout.
	KVPullFailRate float64 `json:"kv_pull_fail_rate"`
	// KVEventsPaused discards the KV events of every scheduler step that
	// ends while it is set: the stream goes silent, with no gap and no
	// AllBlocksCleared, as if the publisher had hung. Clearing it resumes
	// publishing with the next step. Only with KV events on.
	KVEventsPaused bool `json:"kv_events_paused"`
}

// faultPatch is a partial update; absent fields keep their value.
type faultPatch struct {
	ErrorRate      *float64  `json:"error_rate"`
	HangRate       *float64  `json:"hang_rate"`
	HangMax        *duration `json:"hang_max"`
	DieRate        *float64  `json:"die_rate"`
	DieAfterTokens *int      `json:"die_after_tokens"`
	SlowFactor     *float64  `json:"slow_factor"`
	GarbageRate    *float64  `json:"garbage_rate"`
	CutRate        *float64  `json:"cut_rate"`
	StallRate      *float64  `json:"stall_rate"`
	ErrorEventRate *float64  `json:"error_event_rate"`
	KVPullFailRate *float64  `json:"kv_pull_fail_rate"`
	KVEventsPaused *bool     `json:"kv_events_paused"`
	// ResetCacheSilently, when true, is an action rather than a setting
	// (GET never shows it): once the patch is applied, every cached block
	// no sequence references is dropped, as POST /reset_prefix_cache does,
	// but with no AllBlocksCleared. Blocks running or pinned sequences hold
	// stay. false does nothing.
	ResetCacheSilently *bool `json:"reset_cache_silently"`
}

// duration is a time.Duration written as a Go duration string ("1m30s").
type duration time.Duration

func (d duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("must be a duration string like \"30s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// faultDraw is what happens to one request. At most one of fail, hang,
// die, garbage, cut, stall, errorEvent and kvPullFail is set.
type faultDraw struct {
	fail     bool          // answer 500
	hang     bool          // hold the connection without a response
	hangMax  time.Duration // bound of the hang (and of a stall)
	die      bool          // stop after dieAfter tokens, close the connection
	dieAfter int           // tokens a dying, garbled, cut or stalled stream sends first
	slow     float64       // multiplier for modelled durations (1 = none)
	garbage  bool          // answer 200 with a body (or an event) that is not JSON
	html     bool          // the garbage is an HTML page, else truncated JSON
	cut      bool          // close the connection in the middle of an event (or body)
	stall    bool          // stop sending after dieAfter tokens (or the headers), keep the connection
	// errorEvent fails the generation inside the engine after dieAfter
	// tokens (a context leg at once); kvPullFail fails a generation
	// request's KV pull. Both are reported as the engine reports them.
	errorEvent bool
	kvPullFail bool
}

// faults holds the current settings and draws per-request faults. It is
// safe for concurrent use.
type faults struct {
	initial  faultSettings
	kvEvents bool // KV events are on: kv_events_paused may be set
	// mu guards set and rng.
	mu  sync.Mutex
	set faultSettings
	rng *rand.Rand
}

func newFaults(cfg Config) *faults {
	set := faultSettings{
		ErrorRate: cfg.FaultErrorRate, HangRate: cfg.FaultHangRate, HangMax: duration(cfg.FaultHangMax),
		DieRate: cfg.FaultDieRate, DieAfterTokens: cfg.FaultDieAfterTokens, SlowFactor: cfg.FaultSlowFactor,
		GarbageRate: cfg.FaultGarbageRate, CutRate: cfg.FaultCutRate, StallRate: cfg.FaultStallRate,
		ErrorEventRate: cfg.FaultErrorEventRate, KVPullFailRate: cfg.FaultKVPullFailRate,
	}
	return &faults{initial: set, set: set, kvEvents: cfg.KVEventsEndpoint != "",
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0xfa017))}
}

// kvEventsPaused reports whether kv_events_paused is set. The KV event
// sink calls it under scheduler.mu, so faults.mu is taken after
// scheduler.mu, never the other way round.
func (f *faults) kvEventsPaused() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.set.KVEventsPaused
}

// draw decides the faults of one request; kvHandle says whether it
// carries a KV handle to pull (only then may kv_pull_fail strike). With
// every rate 0 it draws nothing, so fault-free runs consume no randomness.
func (f *faults) draw(kvHandle bool) faultDraw {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.set
	d := faultDraw{slow: st.SlowFactor, hangMax: time.Duration(st.HangMax), dieAfter: st.DieAfterTokens}
	kvPullRate := 0.0
	if kvHandle {
		kvPullRate = st.KVPullFailRate
	}
	// The first fault drawn wins; a rate of 0 draws nothing.
	for _, k := range []struct {
		rate float64
		set  *bool
	}{
		{st.ErrorRate, &d.fail}, {st.HangRate, &d.hang}, {st.DieRate, &d.die},
		{st.GarbageRate, &d.garbage}, {st.CutRate, &d.cut}, {st.StallRate, &d.stall},
		{st.ErrorEventRate, &d.errorEvent}, {kvPullRate, &d.kvPullFail},
	} {
		if k.rate > 0 && f.rng.Float64() < k.rate {
			*k.set = true
			break
		}
	}
	if d.garbage {
		d.html = f.rng.IntN(2) == 0
	}
	return d
}

func (f *faults) get() faultSettings {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.set
}

// apply validates and applies a patch; on error nothing changes.
func (f *faults) apply(p faultPatch) (faultSettings, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := f.set
	setRate := func(key string, dst *float64, v *float64) error {
		if v == nil {
			return nil
		}
		if !(*v >= 0 && *v <= 1) {
			return fmt.Errorf("%s: must be in [0, 1], got %v", key, *v)
		}
		*dst = *v
		return nil
	}
	for _, e := range []error{
		setRate("error_rate", &next.ErrorRate, p.ErrorRate),
		setRate("hang_rate", &next.HangRate, p.HangRate),
		setRate("die_rate", &next.DieRate, p.DieRate),
		setRate("garbage_rate", &next.GarbageRate, p.GarbageRate),
		setRate("cut_rate", &next.CutRate, p.CutRate),
		setRate("stall_rate", &next.StallRate, p.StallRate),
		setRate("error_event_rate", &next.ErrorEventRate, p.ErrorEventRate),
		setRate("kv_pull_fail_rate", &next.KVPullFailRate, p.KVPullFailRate),
	} {
		if e != nil {
			return f.set, e
		}
	}
	if p.HangMax != nil {
		if *p.HangMax <= 0 {
			return f.set, fmt.Errorf("hang_max: must be > 0, got %s", time.Duration(*p.HangMax))
		}
		next.HangMax = *p.HangMax
	}
	if p.DieAfterTokens != nil {
		if *p.DieAfterTokens < 0 {
			return f.set, fmt.Errorf("die_after_tokens: must be >= 0, got %d", *p.DieAfterTokens)
		}
		next.DieAfterTokens = *p.DieAfterTokens
	}
	if p.SlowFactor != nil {
		if !(*p.SlowFactor > 0) {
			return f.set, fmt.Errorf("slow_factor: must be > 0, got %v", *p.SlowFactor)
		}
		next.SlowFactor = *p.SlowFactor
	}
	if p.KVEventsPaused != nil {
		if *p.KVEventsPaused && !f.kvEvents {
			return f.set, errors.New("kv_events_paused: KV events are off (kv_events_endpoint is unset)")
		}
		next.KVEventsPaused = *p.KVEventsPaused
	}
	f.set = next
	return next, nil
}

func (f *faults) reset() faultSettings {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set = f.initial
	return f.set
}

// handleFaults serves /admin/faults: GET shows the settings, POST applies a
// partial update (JSON object with any of the settings' keys, and the
// action reset_cache_silently, run once the update is applied), DELETE
// resets them to the configured values.
func (s *Server) handleFaults(ctx *fasthttp.RequestCtx) {
	var set faultSettings
	switch string(ctx.Method()) {
	case fasthttp.MethodGet:
		set = s.faults.get()
	case fasthttp.MethodDelete:
		set = s.faults.reset()
	case fasthttp.MethodPost:
		var p faultPatch
		dec := json.NewDecoder(bytes.NewReader(ctx.PostBody()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			writeError(ctx, badRequest("", "invalid fault settings: %v", err))
			return
		}
		var err error
		if set, err = s.faults.apply(p); err != nil {
			writeError(ctx, badRequest("", "invalid fault settings: %v", err))
			return
		}
		s.log.Info("fault settings changed", zap.Any("faults", set))
		if p.ResetCacheSilently != nil && *p.ResetCacheSilently {
			dropped, kept := s.sched.resetCacheSilently()
			s.metrics.faults[faultResetCacheSilently].Add(1)
			s.log.Info("prefix cache reset silently (no AllBlocksCleared)",
				zap.Int("dropped_blocks", dropped), zap.Int("kept_referenced_blocks", kept))
		}
	default:
		writeError(ctx, methodNotAllowed())
		return
	}
	body, _ := json.Marshal(set) // plain struct, cannot fail
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// hang holds the connection without answering until the client closes it,
// hangMax passes or the server stops; then the connection is closed.
func (s *Server) hang(ctx *fasthttp.RequestCtx, hangMax time.Duration) {
	s.metrics.faults[faultHang].Add(1)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		s.hijacked.Add(1)
		defer s.hijacked.Add(-1)
		s.holdConn(c, hangMax)
	})
}

// holdConn reads and discards from c until it fails (the client gave up),
// the deadline passes or the server stops. It polls every 100 ms so that a
// stop is noticed without a second goroutine.
func (s *Server) holdConn(c net.Conn, hangMax time.Duration) {
	deadline := time.Now().Add(hangMax)
	buf := make([]byte, 512)
	for {
		select {
		case <-s.stopping:
			return
		default:
		}
		now := time.Now()
		if !now.Before(deadline) {
			return
		}
		next := now.Add(100 * time.Millisecond)
		if next.After(deadline) {
			next = deadline
		}
		if err := c.SetReadDeadline(next); err != nil {
			return
		}
		_, err := c.Read(buf)
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			return
		}
	}
}

// die closes the connection without a response (a non-streaming request
// whose worker died).
func (s *Server) die(ctx *fasthttp.RequestCtx) {
	s.metrics.faults[faultDie].Add(1)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {}) // fasthttp closes the connection on return
}
