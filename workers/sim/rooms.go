package sim

import (
	"context"
	"time"
)

// takePinWait is takePin for a pin that may not exist yet: it waits up to
// wait, or until ctx ends, for a pin under key to be added, then takes it
// as takePin does. It returns errHandleUnknown when none appeared in time
// and ctx.Err() when ctx ended first. It blocks; check runs under the
// scheduler lock and must not block.
func (s *scheduler) takePinWait(ctx context.Context, key string, wait time.Duration, now func() time.Time,
	check func(pinInfo) error) (pinInfo, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if _, ok := s.pins[key]; ok {
			info, err := s.takePinLocked(key, now(), check)
			s.unlock()
			return info, err
		}
		if s.pinAdded == nil {
			s.pinAdded = make(chan struct{})
		}
		added := s.pinAdded
		s.mu.Unlock()
		select {
		case <-added:
		case <-timer.C:
			return pinInfo{}, errHandleUnknown
		case <-ctx.Done():
			return pinInfo{}, ctx.Err()
		}
	}
}
