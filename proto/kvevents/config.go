package kvevents

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// SubscriberConfig configures a Subscriber. Defaults() fills the zero fields;
// Validate() reports the first invalid one by its path.
type SubscriberConfig struct {
	// Endpoint is the ZeroMQ endpoint, "tcp://host:port" or "ipc://path".
	// Required. With Bind false the subscriber connects to a publisher that
	// binds it (vLLM and SGLang bind their default "tcp://*:5557"); with Bind
	// true the subscriber listens there ("tcp://*:5557", port 0 for any) and
	// publishers connect to it (vLLM connects when its endpoint has no "*").
	Endpoint string
	// Bind makes the subscriber listen on Endpoint instead of connecting.
	// Several publishers may then connect; they must use distinct topics, since
	// sequence numbers are tracked per topic.
	Bind bool
	// ReplayEndpoint is the publisher's ROUTER replay endpoint (vLLM
	// replay_endpoint), "" for none: then a sequence gap always resets. Only
	// with Bind false, as it names one publisher.
	ReplayEndpoint string
	// Topic is the subscription prefix; "" (the engines' default topic) takes
	// every message.
	Topic string
	// QueueSize is the number of batches buffered between the network reader
	// and the Sink. Default 1024. On overflow the queue is discarded and the
	// affected topics reset.
	QueueSize int
	// ReplayTimeout bounds one replay round trip. Default 2s.
	ReplayTimeout time.Duration
	// MaxReplayBatches bounds the replies read for one replay. Default 10000
	// (vLLM's buffer_steps).
	MaxReplayBatches int
	// DialTimeout bounds one connection attempt. Default 2s.
	DialTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between reconnection attempts,
	// doubling from Min to Max. Defaults 100ms and 5s.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// MaxStreams bounds the topics tracked at once; batches on further topics
	// are dropped. Default 256.
	MaxStreams int
	// Now is the clock for Stats.LastBatch. Default time.Now.
	Now func() time.Time
}

// Defaults returns c with every zero field set to its default.
func (c SubscriberConfig) Defaults() SubscriberConfig {
	if c.QueueSize == 0 {
		c.QueueSize = 1024
	}
	if c.ReplayTimeout == 0 {
		c.ReplayTimeout = 2 * time.Second
	}
	if c.MaxReplayBatches == 0 {
		c.MaxReplayBatches = 10_000
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 5 * time.Second
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = 256
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks c after Defaults; errors name the field as
// "kvevents.<field>".
func (c SubscriberConfig) Validate() error {
	if err := validateEndpoint("kvevents.endpoint", c.Endpoint); err != nil {
		return err
	}
	if c.ReplayEndpoint != "" {
		if c.Bind {
			return errors.New("kvevents.replay_endpoint: only valid when not binding (it names one publisher)")
		}
		if err := validateEndpoint("kvevents.replay_endpoint", c.ReplayEndpoint); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"queue_size", int64(c.QueueSize)},
		{"max_replay_batches", int64(c.MaxReplayBatches)},
		{"max_streams", int64(c.MaxStreams)},
		{"replay_timeout", int64(c.ReplayTimeout)},
		{"dial_timeout", int64(c.DialTimeout)},
		{"min_backoff", int64(c.MinBackoff)},
		{"max_backoff", int64(c.MaxBackoff)},
	} {
		if f.v <= 0 {
			return fmt.Errorf("kvevents.%s: must be > 0", f.name)
		}
	}
	if c.MaxBackoff < c.MinBackoff {
		return errors.New("kvevents.max_backoff: must be >= min_backoff")
	}
	return nil
}

// validateEndpoint accepts tcp://, ipc:// and inproc:// endpoints.
func validateEndpoint(path, ep string) error {
	for _, scheme := range []string{"tcp://", "ipc://", "inproc://"} {
		if strings.HasPrefix(ep, scheme) && len(ep) > len(scheme) {
			return nil
		}
	}
	if ep == "" {
		return fmt.Errorf("%s: required", path)
	}
	return fmt.Errorf("%s: %q: want tcp://, ipc:// or inproc://", path, ep)
}
