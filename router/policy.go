package router

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
)

// Policy names accepted in router.policy.
const (
	PolicyConversation   = "conversation"
	PolicyRoundRobin     = "round-robin"
	PolicyLeastLoad      = "least-load"
	PolicyConsistentHash = "consistent-hash"
	PolicyKVAware        = "kv-aware"
)

// PolicyNames lists the valid router.policy values.
var PolicyNames = []string{PolicyConversation, PolicyRoundRobin, PolicyLeastLoad, PolicyConsistentHash, PolicyKVAware}

func checkPolicyName(name string) error {
	if slices.Contains(PolicyNames, name) {
		return nil
	}
	return fmt.Errorf("unknown policy %q (valid: %s)", name, strings.Join(PolicyNames, ", "))
}

// Policy picks one worker among candidates for one phase.
type Policy interface {
	// Select returns one of candidates, which is non-empty and sorted by ID.
	// It must be safe for concurrent use and must not retain candidates.
	Select(candidates []*Endpoint, req *Request) *Endpoint
}

// RoundRobin cycles through the candidates.
type RoundRobin struct{ next atomic.Uint64 }

var _ Policy = (*RoundRobin)(nil)

// Select returns the next candidate in turn.
func (p *RoundRobin) Select(candidates []*Endpoint, _ *Request) *Endpoint {
	return candidates[p.next.Add(1)%uint64(len(candidates))]
}

// LeastLoad picks the candidate with the least token-weighted load; ties
// rotate evenly, never by slice order.
type LeastLoad struct{ next atomic.Uint64 }

var _ Policy = (*LeastLoad)(nil)

// Select returns a least-loaded candidate.
func (p *LeastLoad) Select(candidates []*Endpoint, _ *Request) *Endpoint {
	return leastLoaded(candidates, p.next.Add(1))
}

// leastLoaded returns the candidate with the least load, then the fewest
// requests in flight; among candidates tied on both it returns the
// (turn mod ties)-th, so ties rotate evenly whatever their position.
func leastLoaded(candidates []*Endpoint, turn uint64) *Endpoint {
	bestLoad, bestInFlight := candidates[0].Load(), candidates[0].InFlight()
	ties := 1
	for _, ep := range candidates[1:] {
		load, inflight := ep.Load(), ep.InFlight()
		switch {
		case load < bestLoad || (load == bestLoad && inflight < bestInFlight):
			bestLoad, bestInFlight, ties = load, inflight, 1
		case load == bestLoad && inflight == bestInFlight:
			ties++
		}
	}
	k := int(turn % uint64(ties))
	for _, ep := range candidates {
		if ep.Load() == bestLoad && ep.InFlight() == bestInFlight {
			if k == 0 {
				return ep
			}
			k--
		}
	}
	return candidates[0] // loads moved between the two scans; any choice is fine
}
