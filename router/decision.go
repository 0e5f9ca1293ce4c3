package router

// Decision is how a request's workers were chosen, as X-Duet-Route and the
// route metrics name it (String).
type Decision uint8

// Decisions. The cost model's say how the ctx worker it chose relates to
// the prompt's cache and the session's pin; the other policies name
// themselves.
const (
	// DecisionNew: every candidate held as much of the prompt (nothing, or
	// a prefix they all hold such as a common system prompt); the cheapest
	// by backlog was chosen.
	DecisionNew Decision = iota
	// DecisionCached: a worker holding more of the prompt than another was
	// the cheapest (a request without a pinned session).
	DecisionCached
	// DecisionSticky: the session's pinned ctx worker was the cheapest.
	DecisionSticky
	// DecisionMoved: the session's pinned ctx worker was available but
	// another was cheaper by more than the pin's weight; the pin moves.
	DecisionMoved
	// DecisionRepin: the session's pinned ctx or gen worker was
	// unavailable.
	DecisionRepin
	// DecisionParent: a sub-agent's first turn went to its parent
	// session's ctx worker (and the least loaded gen worker).
	DecisionParent
	// DecisionRoundRobin and DecisionLeastLoad: those policies' picks.
	DecisionRoundRobin
	DecisionLeastLoad
	// DecisionHash: consistent-hash's first choice; DecisionFallback: it
	// walked past an unavailable worker.
	DecisionHash
	DecisionFallback
	numDecisions
)

var decisionNames = [numDecisions]string{"new", "cached", "sticky", "moved", "repin", "parent", PolicyRoundRobin, PolicyLeastLoad, "hash", "fallback"}

// String names the decision.
func (d Decision) String() string {
	if d < numDecisions {
		return decisionNames[d]
	}
	return "other"
}

// DecisionKinds lists every decision's name, a bounded set for metric
// labels.
var DecisionKinds = decisionNames[:]

// DecisionKind returns name when it names a decision, else "other".
func DecisionKind(name string) string {
	for _, k := range DecisionKinds {
		if k == name {
			return k
		}
	}
	return "other"
}
