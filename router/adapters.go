package router

import (
	"slices"
	"sort"
)

// LoRA adapters. A worker serves its base model and the adapters it
// declares (its engine's model list, or the fleet's configuration); a
// request for an adapter may only go to workers that serve it, for both
// phases.

// adapterSet is a worker's adapters, sorted; immutable once stored.
type adapterSet []string

// HasAdapter reports whether the worker serves adapter name ("" is the
// base model, which every worker serves).
func (e *Endpoint) HasAdapter(name string) bool {
	if name == "" {
		return true
	}
	set := e.adapters.Load()
	if set == nil {
		return false
	}
	_, found := slices.BinarySearch(*set, name)
	return found
}

// Adapters returns the adapters the worker serves, sorted; the slice is
// shared: do not modify it.
func (e *Endpoint) Adapters() []string {
	if set := e.adapters.Load(); set != nil {
		return *set
	}
	return nil
}

// setAdapters stores names (any order, duplicates allowed) as the worker's
// adapters, when they differ from what it has.
func (e *Endpoint) setAdapters(names []string) {
	set := adapterSet(slices.Compact(slices.Sorted(slices.Values(names))))
	if slices.Equal(set, e.Adapters()) {
		return
	}
	e.adapters.Store(&set)
}

// Adapters returns every adapter some worker of the pool serves, sorted.
func (p *Pool) Adapters() []string {
	seen := map[string]bool{}
	for _, ep := range p.snapshot.Load().all {
		for _, a := range ep.Adapters() {
			seen[a] = true
		}
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// HasAdapter reports whether some worker of the pool serves adapter name.
func (p *Pool) HasAdapter(name string) bool {
	for _, ep := range p.snapshot.Load().all {
		if ep.HasAdapter(name) {
			return true
		}
	}
	return false
}

// serving keeps the endpoints that serve adapter (all of them for the base
// model).
func serving(eps []*Endpoint, adapter string) []*Endpoint {
	if adapter == "" {
		return eps
	}
	out := eps[:0:0]
	for _, ep := range eps {
		if ep.HasAdapter(adapter) {
			out = append(out, ep)
		}
	}
	return out
}
