package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/duet-serve/duet/workers/sim/model"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/tokenizer"
)

// Server is one simulated engine worker. Create it with New and run it with
// Serve; a Server serves once.
type Server struct {
	cfg      Config
	role     disagg.Role
	tok      *tokenizer.Tokenizer
	log      *zap.Logger
	vocab    *vocab
	model    model.Timing
	prefillQ model.PrefillQueue
	sched    *scheduler
	faults   *faults
	metrics  metrics
	clock    clock
	ids      *idSource
	engineID string // vLLM remote_engine_id
	created  int64  // unix seconds, for /v1/models and responses
	srv      *fasthttp.Server
	client   *http.Client // pulls from context workers

	url     atomic.Pointer[string]
	started atomic.Bool
	ready   chan struct{} // closed once Serve has set the URL
	// bootstrapAddr is the SGLang bootstrap server's listen address, set
	// before ready is closed; empty when the worker serves none.
	bootstrapAddr atomic.Pointer[string]
	// kvEvents is the KV cache's event sink; nil when kv_events_endpoint is
	// unset. kvEventsEndpoint and kvEventsReplay are the bound endpoints,
	// set before ready is closed.
	kvEvents         *kvEventSink
	kvEventsEndpoint atomic.Pointer[string]
	kvEventsReplay   atomic.Pointer[string]

	// stopping is closed when shutdown begins: hangs end, /health says 503.
	stopping chan struct{}
	// abortCtx is cancelled when in-flight requests must end (shutdown grace
	// period over): waits, modelled sleeps and pulls return early. It is the
	// server's lifetime, not a request's, hence stored.
	abortCtx context.Context
	abort    context.CancelFunc
	// hijacked counts connections held by hang faults.
	hijacked atomic.Int64
	// streams counts stream writers that have not returned.
	streams atomic.Int64
}

// New builds a worker from a validated configuration and a shared
// tokenizer; log may be nil.
func New(cfg Config, tok *tokenizer.Tokenizer, log *zap.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if tok == nil {
		return nil, errors.New("sim: tokenizer is nil")
	}
	if log == nil {
		log = zap.NewNop()
	}
	role, _ := disagg.ParseRole(cfg.Role) // validated above
	v, err := newVocab(tok)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	f := newFaults(cfg)
	var events *kvEventSink
	if cfg.KVEventsEndpoint != "" {
		events = newKVEventSink(kvEventQueueLength, f.kvEventsPaused, cfg.LoraAdapters)
	}
	s := &Server{
		cfg:      cfg,
		role:     role,
		tok:      tok,
		log:      log.With(zap.String("role", cfg.Role)),
		vocab:    v,
		model:    newTimeModel(cfg),
		sched:    newScheduler(cfg, events),
		kvEvents: events,
		faults:   f,
		clock:    realClock(),
		ids:      newIDSource(),
		created:  time.Now().Unix(),
		client:   newPullClient(),
		ready:    make(chan struct{}),
		stopping: make(chan struct{}),
	}
	s.engineID = "duet-sim-" + s.ids.requestID()
	s.abortCtx, s.abort = context.WithCancel(context.Background())
	s.srv = &fasthttp.Server{
		Handler:               s.route,
		ErrorHandler:          func(ctx *fasthttp.RequestCtx, err error) { writeError(ctx, serverErrorFor(err)) },
		Name:                  "duet-sim",
		ReadBufferSize:        cfg.MaxHeaderBytes,
		MaxRequestBodySize:    cfg.MaxBodyBytes,
		ReadTimeout:           30 * time.Second,
		IdleTimeout:           2 * time.Minute,
		WriteTimeout:          0, // a deadline over whole streams would cut them
		CloseOnShutdown:       true,
		NoDefaultServerHeader: false,
		Logger:                fasthttpLogger{s.log},
	}
	return s, nil
}

// Serve serves on ln until ctx is done, then shuts down: it stops
// accepting, lets in-flight requests finish for up to shutdown_timeout,
// aborts the rest, and returns nil. It returns an error when ln fails, when
// called twice, or when an SGLang context worker cannot listen on its
// bootstrap_port or the KV event sockets cannot bind (then before the URL
// is ready). ln is closed on return.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("sim: Serve called twice")
	}
	u := s.cfg.AdvertiseURL
	if u == "" {
		u = urlFromAddr(ln.Addr())
	}
	u = strings.TrimRight(u, "/")
	s.url.Store(&u)
	fields := []zap.Field{zap.String("url", u), zap.String("protocol", s.cfg.Protocol), zap.String("model", s.cfg.Model)}
	if len(s.cfg.LoraAdapters) > 0 {
		fields = append(fields, zap.Strings("lora_adapters", s.cfg.LoraAdapters))
	}
	var kvPub *kvEventPublisher
	if s.kvEvents != nil {
		var err error
		if kvPub, err = s.startKVEvents(); err != nil {
			_ = ln.Close()
			return fmt.Errorf("sim: %w", err)
		}
		fields = append(fields, zap.String("kv_events_endpoint", s.KVEventsEndpoint()))
	}
	var boot *bootstrapServer
	if s.cfg.servesBootstrap() {
		var err error
		if boot, err = s.startBootstrap(); err != nil {
			_ = ln.Close()
			if kvPub != nil {
				_ = kvPub.Stop()
			}
			return fmt.Errorf("sim: %w", err)
		}
		s.bootstrapAddr.Store(&boot.addr)
		fields = append(fields, zap.String("bootstrap_addr", boot.addr))
	}
	close(s.ready)
	s.log.Info("sim worker serving", fields...)

	loopCtx, stopLoop := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	loops.Go(func() { s.expiryLoop(loopCtx, expiryInterval(s.cfg.KVTransferTimeout)) })
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(ln) }()

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		errc = nil
	}
	s.shutdown()
	_ = ln.Close() // Serve may not have registered ln when ctx ended: it would accept forever
	if errc != nil {
		if err := <-errc; err != nil && serveErr == nil {
			serveErr = err
		}
	}
	if boot != nil {
		boot.stop() // after the abort, so its waiting pulls have ended
	}
	stopLoop()
	loops.Wait()
	if n := s.sched.dropAllPins(); n > 0 {
		s.log.Debug("dropped unpulled kv handles at shutdown", zap.Int("count", n))
	}
	s.client.CloseIdleConnections()
	if kvPub != nil { // last: every event of the shutdown is queued by now
		if err := kvPub.Stop(); err != nil {
			s.log.Warn("closing the kv event publisher", zap.Error(err))
		}
	}
	if serveErr != nil {
		return fmt.Errorf("sim: serve %s: %w", u, serveErr)
	}
	return nil
}

// shutdown stops the fasthttp server in two phases: a grace period for
// in-flight requests, then an abort that makes them end at once.
func (s *Server) shutdown() {
	close(s.stopping)
	grace, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	err := s.srv.ShutdownWithContext(grace)
	cancel()
	s.abort()
	if err != nil {
		s.log.Warn("aborting in-flight requests at shutdown", zap.Error(err))
		final, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.srv.ShutdownWithContext(final); err != nil {
			s.log.Warn("connections still open after abort", zap.Error(err))
		}
		cancel()
	}
	// Stream writers and hang faults run on goroutines fasthttp no longer
	// counts; both end promptly once aborted.
	deadline := time.Now().Add(5 * time.Second)
	for (s.streams.Load() > 0 || s.hijacked.Load() > 0) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// URL returns the base URL other workers use to reach this one; it is set
// once Serve has started and is empty before.
func (s *Server) URL() string {
	if p := s.url.Load(); p != nil {
		return *p
	}
	return ""
}

// BootstrapAddr returns the listen address (host:port) of the SGLang
// bootstrap server, set once Serve has started; it is empty when the
// worker serves none (see Config.BootstrapPort).
func (s *Server) BootstrapAddr() string {
	if p := s.bootstrapAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// Addr returns the configured listen address, host:port.
func (c Config) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

func urlFromAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return "http://" + a.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func expiryInterval(timeout time.Duration) time.Duration {
	return min(max(timeout/4, 10*time.Millisecond), time.Second)
}

// route dispatches a request; it recovers panics into a 500.
func (s *Server) route(ctx *fasthttp.RequestCtx) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in handler", zap.Any("panic", r), zap.ByteString("path", ctx.Path()))
			writeError(ctx, &httpError{status: http.StatusInternalServerError, msg: "internal error"})
		}
	}()
	path, method := string(ctx.Path()), string(ctx.Method())
	want := fasthttp.MethodPost
	var h func(*fasthttp.RequestCtx)
	switch path {
	case "/v1/chat/completions":
		h = func(c *fasthttp.RequestCtx) { s.handleCompletion(c, kindChat) }
	case "/v1/completions":
		h = func(c *fasthttp.RequestCtx) { s.handleCompletion(c, kindCompletion) }
	case pullPath:
		h = s.handlePull
	case "/v1/models":
		want, h = fasthttp.MethodGet, s.handleModels
	case "/health":
		want, h = fasthttp.MethodGet, s.handleHealth
	case "/metrics":
		want, h = fasthttp.MethodGet, s.handleMetrics
	case "/reset_prefix_cache":
		h = s.handleResetPrefixCache
	case "/admin/faults":
		want, h = "", s.handleFaults // checks its own methods
	case "/get_server_info", "/server_info":
		if s.cfg.Protocol != ProtocolSGLang {
			notFound(ctx, method, path)
			return
		}
		want, h = fasthttp.MethodGet, s.handleServerInfo
	default:
		notFound(ctx, method, path)
		return
	}
	if want != "" && method != want && !(want == fasthttp.MethodGet && method == fasthttp.MethodHead) {
		writeError(ctx, methodNotAllowed())
		return
	}
	h(ctx)
}

func notFound(ctx *fasthttp.RequestCtx, method, path string) {
	writeError(ctx, &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("no route for %s %s", method, path)})
}

func methodNotAllowed() *httpError {
	return &httpError{status: http.StatusMethodNotAllowed, msg: "method not allowed"}
}

func (s *Server) handleHealth(ctx *fasthttp.RequestCtx) {
	select {
	case <-s.stopping:
		ctx.SetStatusCode(http.StatusServiceUnavailable)
	default:
		ctx.SetStatusCode(http.StatusOK)
	}
}

// handleResetPrefixCache is vLLM's POST /reset_prefix_cache (a dev-mode
// route there): it drops every cached block, publishing AllBlocksCleared
// when KV events are on, and answers 200 {"success": bool}; the reset
// fails, changing nothing, while a sequence runs or a KV handle is pinned.
func (s *Server) handleResetPrefixCache(ctx *fasthttp.RequestCtx) {
	ok := s.sched.resetCache()
	s.log.Info("resetting prefix cache", zap.Bool("success", ok))
	body, _ := json.Marshal(struct {
		Success bool `json:"success"`
	}{ok}) // cannot fail
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	s.metrics.write(ctx, s.cfg.Model, s.cfg.cacheTokens(), s.cfg.BlockSize, s.sched.stats())
	writeKVEventMetrics(ctx, s.cfg.Model, s.kvEvents)
	if s.cfg.Protocol == ProtocolVLLM {
		writeCacheConfigInfo(ctx, s.cfg)
	}
}

// fasthttpLogger routes fasthttp's own messages (mostly connection errors
// of clients that went away) to debug level.
type fasthttpLogger struct{ log *zap.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), zap.String("component", "fasthttp"))
}
