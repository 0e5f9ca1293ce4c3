package tenant

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Limit names, as in LimitError.Limit and duet_tenant_rejected_total.
const (
	LimitInput       = "input_tokens_per_minute"
	LimitOutput      = "output_tokens_per_minute"
	LimitConcurrency = "max_concurrency"
)

// Shared is a store every replica enforces the limits through: token
// buckets and leases of requests in flight (router/redisstore.Store). Its
// calls are bounded; an error means the store is unreachable.
type Shared interface {
	// TakeTokens charges cost to bucket name (refill perSecond up to
	// capacity); unless settle, a bucket at or below zero refuses.
	TakeTokens(name string, perSecond, capacity, cost float64, settle bool) (ok bool, level float64, err error)
	// AcquireLease adds lease id to set name unless it holds limit live ones.
	AcquireLease(name, id string, limit int, lease time.Duration) (bool, error)
	// RenewLeases extends the leases ids of set name to lease from now.
	RenewLeases(name string, ids []string, lease time.Duration) error
	// ReleaseLease removes lease id from set name.
	ReleaseLease(name, id string) error
	// LeaseOwner names this replica among the store's users.
	LeaseOwner() string
	// Up reports whether the store answered its last call.
	Up() bool
	// Replicas is the number of live replicas (0 while the store is down).
	Replicas() int64
}

// Lease timing for shared concurrency: a replica renews its leases every
// leaseRenew; a replica that stops (killed) frees its tenants' slots after
// at most leaseTTL.
const (
	leaseTTL   = 30 * time.Second
	leaseRenew = 10 * time.Second
)

// LimitError is a request over one of its tenant's limits.
type LimitError struct {
	// Tenant is the tenant's name.
	Tenant string
	// Limit is which limit (LimitInput, LimitOutput, LimitConcurrency).
	Limit string
	// Value is the configured limit.
	Value int
	// RetryAfter is when the limit will let a request through again, at
	// least 1s.
	RetryAfter time.Duration
}

// Error describes the rejection.
func (e *LimitError) Error() string {
	return fmt.Sprintf("tenant %s: over its %s of %d", e.Tenant, e.Limit, e.Value)
}

// Limiter enforces the tenants' limits. Build it with NewLimiter; it is
// safe for concurrent use.
type Limiter struct {
	burst  time.Duration
	shared Shared // nil: this replica alone
	now    func() time.Time

	mu       sync.Mutex // guards the fields below
	buckets  map[string]*bucket
	inflight map[string]int             // local requests in flight, by tenant
	leases   map[string]map[string]bool // shared leases this replica holds, by tenant
	replicas int64                      // the last replica count the store gave
	seq      uint64
}

// NewLimiter returns a limiter; shared nil enforces the limits on this
// replica alone; now nil is time.Now.
func NewLimiter(cfg Config, shared Shared, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{burst: cfg.Burst, shared: shared, now: now, buckets: map[string]*bucket{},
		inflight: map[string]int{}, leases: map[string]map[string]bool{}, replicas: 1}
}

// Grant is one admitted request's hold on its tenant's limits. Done ends
// it; only the first call counts.
type Grant struct {
	l        *Limiter
	t        *Tenant
	input    int    // input tokens charged at admission
	expected int    // output tokens charged at admission
	lease    string // shared lease id ("" for none)
	local    bool   // a local concurrency slot is held
	mu       sync.Mutex
	done     bool
}

// Admit checks and charges t's limits for a request of input prompt
// tokens expected to generate output tokens, and returns its grant, or a
// *LimitError. A nil tenant has no limits (nil grant, whose Done is a
// no-op). Token buckets let a request through while they are above zero
// and may go below it (a large request borrows from the next seconds), so
// over time a tenant gets its rate, give or take one request.
func (l *Limiter) Admit(t *Tenant, input, output int) (*Grant, error) {
	if t == nil {
		return nil, nil
	}
	g := &Grant{l: l, t: t, input: input, expected: output}
	if err := l.acquireSlot(g); err != nil {
		return nil, err
	}
	if err := l.take(t, LimitInput, t.spec.InputTokensPerMinute, input); err != nil {
		l.releaseSlot(g)
		return nil, err
	}
	if err := l.take(t, LimitOutput, t.spec.OutputTokensPerMinute, output); err != nil {
		l.settle(t, LimitInput, t.spec.InputTokensPerMinute, -input)
		l.releaseSlot(g)
		return nil, err
	}
	return g, nil
}

// Done ends the grant: the output bucket is charged what was generated
// beyond the expected output (or refunded what was not), the input is
// refunded when the prompt never reached a worker (served false: the
// request was turned away after its admission here), and the request
// leaves the tenant's concurrency.
func (g *Grant) Done(generated int, served bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return
	}
	g.done = true
	g.l.settle(g.t, LimitOutput, g.t.spec.OutputTokensPerMinute, generated-g.expected)
	if !served {
		g.l.settle(g.t, LimitInput, g.t.spec.InputTokensPerMinute, -g.input)
	}
	g.l.releaseSlot(g)
}

// take charges cost to t's bucket of limit (perMinute tokens, 0: none).
func (l *Limiter) take(t *Tenant, limit string, perMinute, cost int) error {
	if perMinute == 0 {
		return nil
	}
	rate, capacity := l.rate(perMinute)
	name := t.Name + ":" + limit
	if l.shared != nil && l.shared.Up() {
		ok, level, err := l.shared.TakeTokens(name, rate, capacity, float64(cost), false)
		if err == nil {
			l.noteReplicas()
			return refusal(ok, level, rate, t, limit, perMinute)
		}
	}
	rate, capacity = l.localShare(rate, capacity)
	l.mu.Lock()
	defer l.mu.Unlock()
	ok, level := l.bucketLocked(name, capacity).take(rate, capacity, float64(cost), false, l.now())
	return refusal(ok, level, rate, t, limit, perMinute)
}

// settle charges cost (negative: refunds) to t's bucket of limit without
// refusing.
func (l *Limiter) settle(t *Tenant, limit string, perMinute, cost int) {
	if perMinute == 0 || cost == 0 {
		return
	}
	rate, capacity := l.rate(perMinute)
	name := t.Name + ":" + limit
	if l.shared != nil && l.shared.Up() {
		if _, _, err := l.shared.TakeTokens(name, rate, capacity, float64(cost), true); err == nil {
			return
		}
	}
	rate, capacity = l.localShare(rate, capacity)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bucketLocked(name, capacity).take(rate, capacity, float64(cost), true, l.now())
}

// rate returns a per-minute limit's refill per second and bucket size.
func (l *Limiter) rate(perMinute int) (perSecond, capacity float64) {
	perSecond = float64(perMinute) / 60
	return perSecond, perSecond * l.burst.Seconds()
}

// localShare scales a cluster-wide rate to this replica's share when the
// shared store is configured but unreachable: each replica then enforces
// 1/N of the limit, N being the last replica count the store gave.
func (l *Limiter) localShare(rate, capacity float64) (float64, float64) {
	if l.shared == nil {
		return rate, capacity
	}
	l.mu.Lock()
	n := float64(l.replicas)
	l.mu.Unlock()
	return rate / n, capacity / n
}

// noteReplicas remembers the store's replica count for localShare.
func (l *Limiter) noteReplicas() {
	if n := l.shared.Replicas(); n > 0 {
		l.mu.Lock()
		l.replicas = n
		l.mu.Unlock()
	}
}

func (l *Limiter) bucketLocked(name string, capacity float64) *bucket {
	b := l.buckets[name]
	if b == nil {
		b = &bucket{level: capacity, at: l.now()}
		l.buckets[name] = b
	}
	return b
}

// refusal turns a bucket's answer into nil or a *LimitError whose
// RetryAfter is when the bucket is above zero again.
func refusal(ok bool, level, rate float64, t *Tenant, limit string, perMinute int) error {
	if ok {
		return nil
	}
	wait := time.Duration((-level/rate + 1e-3) * float64(time.Second))
	return &LimitError{Tenant: t.Name, Limit: limit, Value: perMinute, RetryAfter: wholeSeconds(wait)}
}

// wholeSeconds rounds d up to whole seconds, at least 1s.
func wholeSeconds(d time.Duration) time.Duration {
	secs := (d + time.Second - 1) / time.Second
	return max(secs, 1) * time.Second
}

// acquireSlot takes one of t's concurrency slots for g.
func (l *Limiter) acquireSlot(g *Grant) error {
	limit := g.t.spec.MaxConcurrency
	if limit == 0 {
		return nil
	}
	full := &LimitError{Tenant: g.t.Name, Limit: LimitConcurrency, Value: limit, RetryAfter: time.Second}
	if l.shared != nil && l.shared.Up() {
		l.mu.Lock()
		l.seq++
		id := l.shared.LeaseOwner() + ":" + strconv.FormatUint(l.seq, 10)
		l.mu.Unlock()
		ok, err := l.shared.AcquireLease(g.t.Name, id, limit, leaseTTL)
		if err == nil {
			if !ok {
				return full
			}
			l.mu.Lock()
			if l.leases[g.t.Name] == nil {
				l.leases[g.t.Name] = map[string]bool{}
			}
			l.leases[g.t.Name][id] = true
			l.mu.Unlock()
			g.lease = id
			return nil
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	share := limit
	if l.shared != nil {
		share = max(1, limit/int(l.replicas))
	}
	if l.inflight[g.t.Name] >= share {
		return full
	}
	l.inflight[g.t.Name]++
	g.local = true
	return nil
}

// releaseSlot gives g's concurrency slot back.
func (l *Limiter) releaseSlot(g *Grant) {
	l.mu.Lock()
	if g.local {
		l.inflight[g.t.Name]--
		g.local = false
	}
	id := g.lease
	if id != "" {
		delete(l.leases[g.t.Name], id)
		g.lease = ""
	}
	l.mu.Unlock()
	if id != "" {
		_ = l.shared.ReleaseLease(g.t.Name, id) // unreachable: the lease expires within leaseTTL
	}
}

// InFlight returns the tenant's requests in flight on this replica.
func (l *Limiter) InFlight(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight[name] + len(l.leases[name])
}

// RenewLeases extends every shared lease this replica holds; call it every
// leaseRenew (Run does).
func (l *Limiter) RenewLeases() {
	if l.shared == nil {
		return
	}
	l.mu.Lock()
	held := make(map[string][]string, len(l.leases))
	for name, ids := range l.leases {
		for id := range ids {
			held[name] = append(held[name], id)
		}
	}
	l.mu.Unlock()
	for name, ids := range held {
		if len(ids) > 0 {
			_ = l.shared.RenewLeases(name, ids, leaseTTL) // unreachable: retried at the next renewal
		}
	}
}

// bucket is a local token bucket. Not goroutine-safe: Limiter.mu guards it.
type bucket struct {
	level float64
	at    time.Time
}

// take refills the bucket to now and charges cost, unless the bucket is at
// or below zero and settle is false. It returns whether it charged and the
// level after.
func (b *bucket) take(rate, capacity, cost float64, settle bool, now time.Time) (bool, float64) {
	if d := now.Sub(b.at); d > 0 {
		b.level = min(capacity, b.level+d.Seconds()*rate)
		b.at = now
	}
	if !settle && b.level <= 0 {
		return false, b.level
	}
	b.level -= cost
	return true, b.level
}

// Run renews this replica's shared leases every leaseRenew until done is
// closed. Without a shared store it returns at once.
func (l *Limiter) Run(done <-chan struct{}) {
	if l.shared == nil {
		return
	}
	tick := time.NewTicker(leaseRenew)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			l.RenewLeases()
		}
	}
}
