package frontend

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/duet-serve/duet/orchestrator"
	"github.com/duet-serve/duet/router"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"go.uber.org/zap"
)

// Options are a Server's dependencies. A server of one model sets
// Orchestrator, Pool, Fleet and Admin; a server of several sets Models
// instead (models.go).
type Options struct {
	Config       Config
	Orchestrator *orchestrator.Orchestrator
	Pool         *router.Pool
	// Models are the models served, when several; each request goes to the
	// one its "model" names.
	Models []Model
	// Gatherer serves /metrics; nil disables the route.
	Gatherer prometheus.Gatherer
	Log      *zap.Logger
	// Version is returned by /version.
	Version string
	// Fleet, when set, adds the fleet's view (processes, restarts) to
	// /cluster_info.
	Fleet func() any
	// Admin serves the admin API when Config.AdminToken is set; nil
	// disables it.
	Admin Admin
}

// Server is the HTTP frontend.
type Server struct {
	opts    Options
	srv     *fasthttp.Server
	metrics fasthttp.RequestHandler
	started time.Time
	byName  map[string]*Model // every model by each of its names
	// hijacked joins the HTTP/1.0 streams relayed on hijacked connections,
	// which fasthttp's shutdown does not wait for.
	hijacked sync.WaitGroup
}

// New builds a Server.
func New(o Options) (*Server, error) {
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: o, started: time.Now()}
	if err := s.initModels(); err != nil {
		return nil, err
	}
	if o.Gatherer != nil {
		s.metrics = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	}
	s.srv = &fasthttp.Server{
		Name:                          "duet",
		Handler:                       s.handle,
		ErrorHandler:                  s.readFailure,
		ReadBufferSize:                o.Config.MaxHeaderBytes,
		MaxRequestBodySize:            o.Config.MaxBodyBytes,
		StreamRequestBody:             true, // lets handle answer 413 with a JSON body instead of a reset
		ReadTimeout:                   o.Config.ReadTimeout,
		IdleTimeout:                   o.Config.IdleTimeout,
		Concurrency:                   o.Config.MaxConcurrency,
		NoDefaultServerHeader:         true,
		DisableHeaderNamesNormalizing: false,
		CloseOnShutdown:               true,
	}
	return s, nil
}

// waitHijacked waits for the hijacked streams to end, or until ctx is done.
func (s *Server) waitHijacked(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.hijacked.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Serve serves on ln until ctx is done, then stops accepting, lets live
// requests finish for up to 30 s, and returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.srv.ShutdownWithContext(shutdownCtx)
	// Shutdown closes only the listeners Serve has registered: when ctx
	// ends before the goroutine above has run, Serve would start after it
	// and accept forever. Closing ln makes it return at once.
	_ = ln.Close()
	s.waitHijacked(shutdownCtx)
	for _, m := range s.opts.Models {
		m.Orchestrator.Close() // join background work once no request can start any
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return <-errc
}
