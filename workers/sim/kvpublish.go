package sim

import (
	"fmt"
	"net"
	"strings"

	"go.uber.org/zap"

	"github.com/duet-serve/duet/proto/kvevents"
)

// batchPublisher sends one batch of KV events; *kvevents.Publisher is one.
// Publish may block (a slow socket); Skip consumes a sequence number for a
// batch lost before Publish, so the next batch shows a gap; Close releases
// the sockets and is called once, after the last Publish or Skip.
type batchPublisher interface {
	Publish(events ...kvevents.Event) (uint64, error)
	Skip() (uint64, error)
	Close() error
}

var _ batchPublisher = (*kvevents.Publisher)(nil)

// kvEventPublisher is the goroutine that drains a kvEventSink's queue into
// a batchPublisher, so that a slow or absent subscriber never holds up the
// scheduler. Serve starts it and stops it last.
type kvEventPublisher struct {
	sink *kvEventSink
	pub  batchPublisher
	log  *zap.Logger
	stop chan struct{} // closed by Stop
	done chan struct{} // closed when run returns
}

func startKVEventPublisher(sink *kvEventSink, pub batchPublisher, log *zap.Logger) *kvEventPublisher {
	p := &kvEventPublisher{sink: sink, pub: pub, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

// run publishes queued batches in order until Stop, then publishes what is
// still queued and returns.
func (p *kvEventPublisher) run() {
	defer close(p.done)
	for {
		select {
		case b := <-p.sink.queue:
			p.publish(b)
		case <-p.stop:
			for {
				select {
				case b := <-p.sink.queue:
					p.publish(b)
				default:
					return
				}
			}
		}
	}
}

// publish skips the sequence numbers of the batches lost before b, then
// sends b, and counts the outcome.
func (p *kvEventPublisher) publish(b kvBatch) {
	st := &p.sink.stats
	for range b.skip {
		if _, err := p.pub.Skip(); err != nil {
			// Only a closed publisher fails, and Stop closes it after run.
			p.log.Warn("kv event sequence number not skipped", zap.Error(err))
			break
		}
	}
	if _, err := p.pub.Publish(b.events...); err != nil {
		st.failedBatches.Add(1)
		st.failedEvents.Add(uint64(len(b.events)))
		p.log.Warn("kv event batch not published", zap.Int("events", len(b.events)), zap.Error(err))
		return
	}
	st.publishedBatches.Add(1)
	st.publishedEvents.Add(uint64(len(b.events)))
}

// Stop stops the goroutine once it has published what was queued, waits for
// it, and closes the publisher. Batches flushed afterwards stay queued
// (or are dropped) and are never sent. Stop is called once.
func (p *kvEventPublisher) Stop() error {
	close(p.stop)
	<-p.done
	return p.pub.Close()
}

// startKVEvents binds the KV event sockets (kv_events_endpoint and
// kv_events_replay_endpoint) and starts the publishing goroutine. It
// records the bound endpoints for KVEventsEndpoint and
// KVEventsReplayEndpoint.
func (s *Server) startKVEvents() (*kvEventPublisher, error) {
	rank := int64(0) // vLLM stamps its data_parallel_rank, 0 without DP
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{
		Endpoint:         s.cfg.KVEventsEndpoint,
		ReplayEndpoint:   s.cfg.KVEventsReplayEndpoint,
		DataParallelRank: &rank,
		Layout:           kvevents.LayoutMap,
	}, s.log)
	if err != nil {
		return nil, fmt.Errorf("kv_events_endpoint: %w", err)
	}
	ep := boundEndpoint(s.cfg.KVEventsEndpoint, pub.Addr())
	s.kvEventsEndpoint.Store(&ep)
	fields := []zap.Field{zap.String("kv_events_endpoint", ep)}
	if s.cfg.KVEventsReplayEndpoint != "" {
		rep := boundEndpoint(s.cfg.KVEventsReplayEndpoint, pub.ReplayAddr())
		s.kvEventsReplay.Store(&rep)
		fields = append(fields, zap.String("kv_events_replay_endpoint", rep))
	}
	s.log.Info("publishing kv cache events", fields...)
	return startKVEventPublisher(s.kvEvents, pub, s.log), nil
}

// boundEndpoint is configured with its address replaced by the one the
// socket bound (the port picked for port 0), or configured itself when the
// socket reports none.
func boundEndpoint(configured string, a net.Addr) string {
	scheme, _, ok := strings.Cut(configured, "://")
	if a == nil || !ok || scheme != "tcp" {
		return configured
	}
	return scheme + "://" + a.String()
}

// KVEventsEndpoint returns the endpoint the KV event PUB socket is bound to
// (with the port it picked), set once Serve has started; empty when KV
// events are off.
func (s *Server) KVEventsEndpoint() string {
	if p := s.kvEventsEndpoint.Load(); p != nil {
		return *p
	}
	return ""
}

// KVEventsReplayEndpoint returns the endpoint of the KV event replay
// socket, set once Serve has started; empty when there is none.
func (s *Server) KVEventsReplayEndpoint() string {
	if p := s.kvEventsReplay.Load(); p != nil {
		return *p
	}
	return ""
}
