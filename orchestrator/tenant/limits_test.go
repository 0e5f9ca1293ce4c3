package tenant

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func limited(spec Spec) (*Limiter, *Tenant, *clock) {
	cfg := Defaults()
	spec.Name = "acme"
	cfg.Tenants = []Spec{spec}
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	return NewLimiter(cfg, nil, c.now), NewSet(cfg).byName["acme"], c
}

func overLimit(t *testing.T, err error, limit string) *LimitError {
	t.Helper()
	var le *LimitError
	require.True(t, errors.As(err, &le), "%v", err)
	require.Equal(t, limit, le.Limit)
	return le
}

// The input bucket holds burst (10 s) of the rate and lets requests
// through while above zero; a refusal says when it is above zero again.
func TestInputTokenRate(t *testing.T) {
	l, acme, c := limited(Spec{InputTokensPerMinute: 6000}) // 100/s, bucket 1,000
	for range 2 {
		_, err := l.Admit(acme, 600, 0)
		require.NoError(t, err)
	}
	_, err := l.Admit(acme, 1, 0)
	le := overLimit(t, err, LimitInput)
	require.Equal(t, 3*time.Second, le.RetryAfter, "200 tokens of debt at 100/s: 2 s, rounded up past it")
	c.advance(2001 * time.Millisecond)
	_, err = l.Admit(acme, 1, 0)
	require.NoError(t, err)

	// Over a long run the admitted tokens are the rate plus one bucket.
	admitted := 0
	for range 600 { // 60 s in 100 ms steps, 50 tokens offered each step (5x the rate)
		c.advance(100 * time.Millisecond)
		if _, err := l.Admit(acme, 50, 0); err == nil {
			admitted += 50
		}
	}
	require.InDelta(t, 6000, admitted, 100)
}

func TestOutputTokensSettleAtTheEnd(t *testing.T) {
	l, acme, _ := limited(Spec{OutputTokensPerMinute: 600}) // 10/s, bucket 100
	g, err := l.Admit(acme, 0, 100)
	require.NoError(t, err)
	_, err = l.Admit(acme, 0, 1)
	overLimit(t, err, LimitOutput)
	g.Done(20, true) // 80 of the expected 100 refunded
	g.Done(20, true) // once
	g2, err := l.Admit(acme, 0, 50)
	require.NoError(t, err)
	g2.Done(200, true) // generated beyond the expectation: charged at the end
	_, err = l.Admit(acme, 0, 1)
	le := overLimit(t, err, LimitOutput)
	require.Equal(t, 13*time.Second, le.RetryAfter, "120 tokens of debt at 10/s: 12 s, rounded up past it")
}

func TestRefundWhenNeverServed(t *testing.T) {
	l, acme, _ := limited(Spec{InputTokensPerMinute: 600})
	g, err := l.Admit(acme, 100, 0)
	require.NoError(t, err)
	g.Done(0, false) // turned away by the queue: the prompt is refunded
	_, err = l.Admit(acme, 100, 0)
	require.NoError(t, err)
	_, err = l.Admit(acme, 1, 0)
	overLimit(t, err, LimitInput)
}

func TestConcurrency(t *testing.T) {
	l, acme, _ := limited(Spec{MaxConcurrency: 2, InputTokensPerMinute: 60})
	a, err := l.Admit(acme, 1, 0)
	require.NoError(t, err)
	_, err = l.Admit(acme, 1, 0)
	require.NoError(t, err)
	_, err = l.Admit(acme, 1, 0)
	le := overLimit(t, err, LimitConcurrency)
	require.Equal(t, time.Second, le.RetryAfter)
	require.Equal(t, 2, l.InFlight("acme"))
	a.Done(0, true)
	require.Equal(t, 1, l.InFlight("acme"))

	// A refusal by a token bucket gives the concurrency slot back.
	for i := 0; i < 20; i++ {
		g, err := l.Admit(acme, 10, 0)
		if err != nil {
			overLimit(t, err, LimitInput)
			break
		}
		g.Done(0, true)
	}
	require.Equal(t, 1, l.InFlight("acme"))
}

func TestNoTenantNoLimits(t *testing.T) {
	l, _, _ := limited(Spec{InputTokensPerMinute: 1})
	g, err := l.Admit(nil, 1<<20, 1<<20)
	require.NoError(t, err)
	require.Nil(t, g)
	g.Done(5, true) // a nil grant is a no-op
}

// fakeShared is a Shared store that is up or down; when up it counts the
// calls and keeps buckets with a fixed level.
type fakeShared struct {
	up       bool
	replicas int64
	takes    int
	leases   map[string]bool
}

func (f *fakeShared) TakeTokens(string, float64, float64, float64, bool) (bool, float64, error) {
	if !f.up {
		return false, 0, errors.New("down")
	}
	f.takes++
	return true, 1, nil
}

func (f *fakeShared) AcquireLease(_, id string, limit int, _ time.Duration) (bool, error) {
	if !f.up {
		return false, errors.New("down")
	}
	if len(f.leases) >= limit {
		return false, nil
	}
	f.leases[id] = true
	return true, nil
}

func (f *fakeShared) RenewLeases(string, []string, time.Duration) error { return nil }

func (f *fakeShared) ReleaseLease(_, id string) error {
	delete(f.leases, id)
	return nil
}

func (f *fakeShared) LeaseOwner() string { return "r1" }
func (f *fakeShared) Up() bool           { return f.up }
func (f *fakeShared) Replicas() int64 {
	if !f.up {
		return 0
	}
	return f.replicas
}

// While the shared store is unreachable, each replica enforces its share
// of the limits: 1/N, N being the replicas the store last counted.
func TestSharedStoreDownEnforcesAShare(t *testing.T) {
	cfg := Defaults()
	cfg.Tenants = []Spec{{Name: "acme", InputTokensPerMinute: 6000, MaxConcurrency: 4}}
	shared := &fakeShared{up: true, replicas: 2, leases: map[string]bool{}}
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	l := NewLimiter(cfg, shared, c.now)
	acme := NewSet(cfg).byName["acme"]
	g, err := l.Admit(acme, 5000, 0)
	require.NoError(t, err)
	require.Equal(t, 1, shared.takes)
	require.Len(t, shared.leases, 1)
	g.Done(0, true)
	require.Empty(t, shared.leases)

	shared.up = false
	admitted := 0
	for range 10 {
		if _, err := l.Admit(acme, 100, 0); err == nil {
			admitted++
		}
	}
	require.Equal(t, 2, admitted, "local concurrency share: 4 / 2 replicas")
	require.Equal(t, 2, l.InFlight("acme"))
}
