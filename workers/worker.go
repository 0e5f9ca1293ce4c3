package workers

import (
	"time"

	"github.com/duet-serve/duet/proto/disagg"
)

// State is a worker's lifecycle state.
type State string

// Worker states. Only StateUp workers should receive traffic.
const (
	// StateStarting: the process runs but has not passed a health check yet
	// (first launch or restart).
	StateStarting State = "starting"
	// StateUp: healthy.
	StateUp State = "up"
	// StateDown: exited, or failed UnhealthyThreshold health checks in a
	// row; a restart may be pending.
	StateDown State = "down"
	// StateFailed: down for good: the restart policy allows no further
	// restart.
	StateFailed State = "failed"
	// StateStopped: the fleet was stopped.
	StateStopped State = "stopped"
)

// Worker is a point-in-time view of one worker, as Fleet.Snapshot returns
// it. It is a value: later changes are not reflected.
type Worker struct {
	// Name identifies the worker (ctx-0, gen-1, ...); stable for the
	// fleet's lifetime, including restarts.
	Name string
	// Role is context or generation.
	Role disagg.Role
	// URL is the base URL, e.g. http://127.0.0.1:8100.
	URL string
	// SidePort is vLLM's NIXL side-channel port or SGLang's bootstrap port
	// (the router sends it as bootstrap_port); 0 when none.
	SidePort int
	// GPUs are the worker's GPU ids; empty for none or external workers.
	GPUs []string
	// PID is the worker's process (and process group) id; 0 when not
	// running or external.
	PID int
	// External is true for a pre-launched worker duet only health-checks:
	// listed in a pool's urls or added by Fleet.AddWorker.
	External bool
	// Removed is true for a worker of the plan that Fleet.RemoveWorker took
	// out of the membership: it should receive no traffic, but a launched
	// worker keeps running and is still supervised.
	Removed bool
	// State is the lifecycle state.
	State State
	// Since is when State last changed.
	Since time.Time
	// Restarts counts restarts since launch.
	Restarts int
	// LastError is the latest failure (exit status, health check error,
	// start failure); empty when none happened.
	LastError string
	// KVCacheTokens is the KV cache size the worker's engine reported, in
	// tokens (Options.CacheSize); 0 when it reported none.
	KVCacheTokens int64
	// KVBlockSize is the KV block size in tokens the worker's engine
	// reported with its cache size; 0 when it reported none.
	KVBlockSize int
	// MaxModelLen is the context length the worker's engine reported, in
	// tokens (prompt plus output; Options.CacheSize); 0 when it reported
	// none.
	MaxModelLen int
	// Adapters are the LoRA adapters the worker serves: the pool's
	// lora_adapters and those its engine lists in /v1/models.
	Adapters []string
	// KVEvents and KVEventsReplay are where the worker publishes its KV
	// cache events and its replay socket ("" when none).
	KVEvents, KVEventsReplay string
}

// Healthy reports whether the worker should receive traffic: it is up and
// not removed.
func (w Worker) Healthy() bool { return w.State == StateUp && !w.Removed }

// Snapshot returns the planned workers as they appear before launch:
// managed workers starting, external ones down until checked.
func (p *Plan) Snapshot() []Worker {
	out := make([]Worker, len(p.Workers))
	for i, s := range p.Workers {
		out[i] = specWorker(&s)
	}
	return out
}

func specWorker(s *WorkerSpec) Worker {
	w := Worker{Name: s.Name, Role: s.Role, URL: s.URL, SidePort: s.SidePort, GPUs: append([]string(nil), s.GPUs...),
		External: s.External, State: StateStarting, KVEvents: s.KVEvents, KVEventsReplay: s.KVEventsReplay, Adapters: s.Adapters}
	if s.External {
		w.State = StateDown
	}
	return w
}
