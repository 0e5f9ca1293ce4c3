package kvevents

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zeromq/zmq4"
	"go.uber.org/zap"
)

// errReplayDone is returned by a replay callback that has what it needs.
var errReplayDone = errors.New("replay done")

// fetchReplay asks the replay endpoint for the batches from `from` on and
// calls each for every reply in order, until the end marker, an error from
// each (returned as is), MaxReplayBatches replies, or ReplayTimeout. It opens
// a DEALER for the request and closes it before returning, so a late reply
// cannot be mistaken for the answer to a later request.
func (s *Subscriber) fetchReplay(ctx context.Context, from uint64, each func(replayReply) error) error {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.ReplayTimeout)
	defer cancel()
	d := zmq4.NewDealer(rctx,
		zmq4.WithDialerMaxRetries(0),
		zmq4.WithDialerTimeout(s.cfg.DialTimeout),
		zmq4.WithLogger(zap.NewStdLog(s.log)))
	defer d.Close()
	if err := d.Dial(boundedEndpoint(s.cfg.ReplayEndpoint)); err != nil {
		return fmt.Errorf("replay dial %s: %w", s.cfg.ReplayEndpoint, err)
	}
	if err := d.SendMulti(zmq4.NewMsgFrom(replayRequest(from)...)); err != nil {
		return fmt.Errorf("replay request: %w", err)
	}
	for n := 0; ; n++ {
		msg, err := d.Recv()
		if rctx.Err() != nil {
			return fmt.Errorf("replay: %w", rctx.Err())
		}
		if err != nil {
			return fmt.Errorf("replay receive: %w", err)
		}
		rep, err := parseReplay(msg.Frames)
		if err != nil {
			return err
		}
		if rep.end {
			return nil
		}
		if n >= s.cfg.MaxReplayBatches {
			return fmt.Errorf("replay: more than %d batches", s.cfg.MaxReplayBatches)
		}
		if err := each(rep); err != nil {
			return err
		}
	}
}
