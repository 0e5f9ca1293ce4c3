package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/orchestrator/protocol/adapters"
	"github.com/duet-serve/duet/orchestrator/protocol/sglang"
	"github.com/duet-serve/duet/orchestrator/protocol/vllm"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/duet-serve/duet/workers"
	"github.com/duet-serve/duet/workers/sim"
)

// cacheSizeReaders says how the fleet reads a worker's KV cache size and
// context length, by the worker's engine, under protocol proto: vLLM and
// SGLang workers (and command or sim workers speaking their protocols)
// report both their engine's way; a sim speaking TensorRT-LLM's protocol
// reports its cache size in its own metrics. TensorRT-LLM reports neither:
// its iteration stats are drained by every read and hold the size only
// after a request, and its model cards carry no context length.
func cacheSizeReaders(proto string) func(engine string) workers.CacheSizeReader {
	var engineWay workers.CacheSizeReader
	a, err := adapters.ByName(proto)
	if r, ok := a.(protocol.CacheSizeReporter); err == nil && ok {
		engineWay = workers.CacheSizeReader{Path: r.CacheSizePath(), Parse: r.ParseCacheSize, BlockSize: r.ParseBlockSize}
	}
	if proto == vllm.Name || proto == sglang.Name { // their /v1/models (workers.ParseModelLen)
		engineWay.ModelLenPath, engineWay.ParseModelLen, engineWay.Adapters = workers.ModelsPath, workers.ParseModelLen, workers.ParseAdapters
	}
	simWay := engineWay
	if simWay.Path == "" {
		simWay = workers.CacheSizeReader{Path: sim.CacheSizePath, Parse: sim.ParseCacheSize, BlockSize: sim.ParseBlockSize}
	}
	byEngine := map[string]workers.CacheSizeReader{workers.EngineSim: simWay, workers.EngineCommand: engineWay}
	switch proto { // the engine that speaks the protocol
	case vllm.Name:
		byEngine[workers.EngineVLLM] = engineWay
	case sglang.Name:
		byEngine[workers.EngineSGLang] = engineWay
	}
	return func(engine string) workers.CacheSizeReader { return byEngine[engine] }
}

// members turns a fleet snapshot into router membership: every worker not
// removed is a member, healthy only when up. Under protocol sglang a
// worker's side port is its bootstrap port.
func members(ws []workers.Worker, protocol string) []router.Member {
	out := make([]router.Member, 0, len(ws))
	for _, w := range ws {
		if w.Removed {
			continue
		}
		m := router.Member{ID: w.Name, URL: w.URL, Role: w.Role, Healthy: w.Healthy(), KVCacheTokens: w.KVCacheTokens,
			KVBlockSize: w.KVBlockSize, MaxModelLen: w.MaxModelLen, KVEvents: w.KVEvents, KVEventsReplay: w.KVEventsReplay,
			Adapters: w.Adapters}
		if protocol == sglang.Name {
			m.BootstrapPort = w.SidePort
		}
		out = append(out, m)
	}
	return out
}

// syncPool keeps the pool equal to the fleet until ctx is done; done is
// closed when the goroutine has returned.
func syncPool(ctx context.Context, s *poolSync) (done <-chan struct{}) {
	changes, unsubscribe := s.fleet.Subscribe()
	s.sync()
	d := make(chan struct{})
	go func() {
		defer close(d)
		defer unsubscribe()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-changes:
				if !ok { // the fleet stopped
					return
				}
				s.sync()
			}
		}
	}()
	return d
}

// servedModels is the orchestrator's model list when the config sets none:
// the models the pools serve (the simulator's default for sim pools that
// name none).
func servedModels(cfg Config) []string {
	if len(cfg.Orchestrator.Models) > 0 {
		return cfg.Orchestrator.Models
	}
	var out []string
	for _, m := range []string{cfg.Fleet.Context.Model, cfg.Fleet.Generation.Model} {
		if m == "" {
			m = cfg.Sim.Model
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// checkSimProtocol rejects a sim fleet behind a protocol the sim cannot
// speak.
func checkSimProtocol(cfg Config) error {
	usesSim := cfg.Fleet.Context.Engine == workers.EngineSim || cfg.Fleet.Generation.Engine == workers.EngineSim
	if usesSim && !slices.Contains(sim.Protocols, cfg.Orchestrator.Protocol) {
		return fmt.Errorf("config: orchestrator.protocol: %q cannot drive sim workers (valid with engine sim: %s)",
			cfg.Orchestrator.Protocol, strings.Join(sim.Protocols, ", "))
	}
	return nil
}

// simTokenizerArgs are the tokenizer flags of launched sim workers: the
// frontend's model tokenizer and template, as absolute paths (a worker
// runs in its own directory), so both sides count the same tokens. The
// built-in encoding needs none: it is the sim's default too.
func simTokenizerArgs(cfg tokenizer.Config) ([]string, error) {
	var args []string
	if cfg.Source != "" {
		abs, err := filepath.Abs(cfg.Source)
		if err != nil {
			return nil, fmt.Errorf("tokenizer.source: %w", err)
		}
		args = append(args, "--tokenizer-source", abs)
	}
	if t := cfg.ChatTemplate; t != "" {
		if _, err := os.Stat(t); err == nil {
			if t, err = filepath.Abs(t); err != nil {
				return nil, fmt.Errorf("tokenizer.chat_template: %w", err)
			}
		}
		args = append(args, "--tokenizer-chat-template", t)
	}
	if cfg.Encoding != tokenizer.Defaults().Encoding {
		args = append(args, "--tokenizer-encoding", cfg.Encoding)
	}
	return args, nil
}

// modelTokenizer returns cfg's tokenizer config with its source filled in
// from the fleet when it has none: the model directory the launched
// engines (vllm, sglang, trtllm) load, when it is a local directory with a
// tokenizer.json, so a launched fleet needs no second setting. A hub id
// (nothing on disk) leaves the built-in encoding.
func modelTokenizer(cfg Config) tokenizer.Config {
	tc := cfg.Tokenizer
	if tc.Source != "" {
		return tc
	}
	for _, p := range []workers.PoolConfig{cfg.Fleet.Context, cfg.Fleet.Generation} {
		if p.Engine == workers.EngineSim || p.Engine == workers.EngineCommand || p.Model == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(p.Model, "tokenizer.json")); err == nil {
			tc.Source = p.Model
			return tc
		}
	}
	return tc
}
