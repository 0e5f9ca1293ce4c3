package queue

import (
	"errors"
	"fmt"
	"time"
)

// Rejections. Match them with errors.Is; errors.As with *RejectError gives
// the Retry-After suggestion.
var (
	// ErrQueueFull: the key already had max_queue_length requests waiting.
	// Returned at once; the client should get 429 Too Many Requests.
	ErrQueueFull = errors.New("admission queue full")
	// ErrWaitTimeout: the request waited max_wait without being admitted.
	// The client should get 503 Service Unavailable.
	ErrWaitTimeout = errors.New("admission queue wait timed out")
	// ErrShed: the request was shed to keep higher priority classes within
	// their wait (priority.go). The client should get 429 Too Many
	// Requests.
	ErrShed = errors.New("shed under overload")
)

// Rejection reasons, as in duet_queue_rejected_total{reason}.
const (
	reasonQueueFull = "queue_full"
	reasonMaxWait   = "max_wait"
	reasonShed      = "shed"
)

// RejectError is a request the queue turned away. It wraps ErrQueueFull,
// ErrWaitTimeout or ErrShed.
type RejectError struct {
	// Key is the queue the request was waiting for.
	Key string
	// Class is the request's priority class.
	Class string
	// Waiting is how many requests were waiting for the key.
	Waiting int
	// Waited is how long the request waited (0 for ErrQueueFull).
	Waited time.Duration

	err        error
	retryAfter time.Duration
}

// Error describes the rejection.
func (e *RejectError) Error() string {
	if e.Waited > 0 {
		return fmt.Sprintf("queue %q, class %s: %v after %s (%d waiting)", e.Key, e.Class, e.err, e.Waited, e.Waiting)
	}
	return fmt.Sprintf("queue %q, class %s: %v (%d waiting)", e.Key, e.Class, e.err, e.Waiting)
}

// Unwrap returns ErrQueueFull, ErrWaitTimeout or ErrShed.
func (e *RejectError) Unwrap() error { return e.err }

// RetryAfter suggests when the client may retry: a whole number of seconds,
// at least 1s and at most max_wait rounded up, estimated from the key's
// backlog, its capacity and how long its slots have been held lately. The
// frontend sends it as Retry-After: int(RetryAfter()/time.Second).
func (e *RejectError) RetryAfter() time.Duration { return e.retryAfter }
