package workers

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// engineInfo holds what duet knows about one engine.
type engineInfo struct {
	program      string        // default executable
	gpus         int           // default GPUs per worker
	startTimeout time.Duration // default start timeout
	needsModel   bool          // model is required
	sidePorts    bool          // the engine takes a side port (NIXL side channel, SGLang bootstrap); see hasSidePorts for sim
	engineConfig bool          // engine_config is supported
}

var engines = map[string]engineInfo{
	EngineSim:     {program: "", gpus: 0, startTimeout: 20 * time.Second},
	EngineCommand: {gpus: 0, startTimeout: 60 * time.Second},
	EngineTRTLLM:  {program: "trtllm-serve", gpus: 1, startTimeout: 10 * time.Minute, needsModel: true, engineConfig: true},
	EngineVLLM:    {program: "vllm", gpus: 1, startTimeout: 10 * time.Minute, needsModel: true, sidePorts: true, engineConfig: true},
	EngineSGLang:  {program: "python", gpus: 1, startTimeout: 10 * time.Minute, needsModel: true, sidePorts: true},
}

// gpusPerWorker is the effective GPU count of one worker of the pool.
func (p PoolConfig) gpusPerWorker() int {
	if p.GPUsPerWorker >= 0 {
		return p.GPUsPerWorker
	}
	return engines[p.Engine].gpus
}

// startTimeout is the effective start timeout of the pool.
func (p PoolConfig) startTimeout() time.Duration {
	if p.StartTimeout > 0 {
		return p.StartTimeout
	}
	return engines[p.Engine].startTimeout
}

// launched reports whether duet launches this pool's workers.
func (p PoolConfig) launched() bool { return len(p.URLs) == 0 }

// hasSidePorts reports whether the pool's launched workers get side ports:
// vllm and sglang always, sim when it speaks sglang (its bootstrap port).
func (p PoolConfig) hasSidePorts(simProtocol string) bool {
	return engines[p.Engine].sidePorts || (p.Engine == EngineSim && simProtocol == SimProtocolSGLang)
}

// sidePortStride is the distance between the side ports of two workers.
func (p PoolConfig) sidePortStride() int {
	if p.Engine == EngineVLLM && p.gpusPerWorker() > 1 {
		return p.gpusPerWorker()
	}
	return 1
}

// Placeholders lists the placeholders expanded in command, args and env.
var Placeholders = []string{"{name}", "{role}", "{host}", "{port}", "{side_port}", "{model}", "{gpus}", "{run_dir}", "{index}"}

var placeholderRE = regexp.MustCompile(`\{[a-z_]+\}`)

// unknownPlaceholder returns the first {word} in s that is not a placeholder.
func unknownPlaceholder(s string) string {
	for _, m := range placeholderRE.FindAllString(s, -1) {
		if !slices.Contains(Placeholders, m) {
			return m
		}
	}
	return ""
}

// expander replaces the placeholders of one worker.
func expander(s *WorkerSpec, p PoolConfig, runDir string) *strings.Replacer {
	model := p.Model
	return strings.NewReplacer(
		"{kv_events_port}", strconv.Itoa(s.Port+p.KVEvents.PortOffset),
		"{name}", s.Name,
		"{role}", string(s.Role),
		"{host}", s.Host,
		"{port}", strconv.Itoa(s.Port),
		"{side_port}", strconv.Itoa(s.SidePort),
		"{model}", model,
		"{gpus}", strings.Join(s.GPUs, ","),
		"{run_dir}", runDir,
		"{index}", strconv.Itoa(s.Index),
	)
}

func expandAll(r *strings.Replacer, in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = r.Replace(s)
	}
	return out
}
