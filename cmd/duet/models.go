package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/viper"
)

// modelConfig is one entry of models: a model served by a fleet of its
// own. Its sections are laid over the file's top-level ones (which hold
// the keys every model shares), key by key.
type modelConfig struct {
	Name         string         `mapstructure:"name" doc:"the model's name: what clients send as model and its workers serve"`
	Aliases      []string       `mapstructure:"aliases" doc:"other names clients may send for the model"`
	Orchestrator map[string]any `mapstructure:"orchestrator" doc:"the model's orchestrator keys (protocol, timeouts, ...), over the top-level ones"`
	Router       map[string]any `mapstructure:"router" doc:"the model's router keys, over the top-level ones"`
	Tokenizer    map[string]any `mapstructure:"tokenizer" doc:"the model's tokenizer keys, over the top-level ones"`
	Fleet        map[string]any `mapstructure:"fleet" doc:"the model's worker pools (context, generation) and fleet keys, over the top-level ones"`
}

// resolveModels returns the configuration of each entry of cfg.Models:
// the top-level settings of v (defaults, file, environment, flags) with
// the entry's sections laid over them, checked like a whole file, and the
// model's name and aliases as the only names its orchestrator serves.
func resolveModels(v *viper.Viper, cfg Config) ([]Config, error) {
	if err := checkModelNames(cfg); err != nil {
		return nil, err
	}
	base := v.AllSettings()
	delete(base, "models")
	out := make([]Config, 0, len(cfg.Models))
	for i, m := range cfg.Models {
		mc, err := modelSettings(base, m)
		if err != nil {
			return nil, fmt.Errorf("config: models[%d] (%s): %w", i, m.Name, err)
		}
		out = append(out, mc)
	}
	return out, nil
}

// modelSettings decodes base with m's sections laid over it.
func modelSettings(base map[string]any, m modelConfig) (Config, error) {
	defaults := defaultConfig()
	mv := viper.New()
	setDefaults(mv, "", defaults)
	overlay := map[string]any{}
	for section, keys := range map[string]map[string]any{"orchestrator": m.Orchestrator, "router": m.Router, "tokenizer": m.Tokenizer, "fleet": m.Fleet} {
		if keys != nil {
			overlay[section] = keys
		}
	}
	if err := mv.MergeConfigMap(base); err != nil {
		return Config{}, err
	}
	if err := mv.MergeConfigMap(overlay); err != nil {
		return Config{}, err
	}
	if err := checkUnknownKeys(mv.AllKeys(), schemaOf(defaults)); err != nil {
		return Config{}, err
	}
	var mc Config
	if err := mv.UnmarshalExact(&mc, decodeHooks()); err != nil {
		return Config{}, decodeError(err)
	}
	mc.Models = nil
	mc.Orchestrator.Models = append([]string{m.Name}, m.Aliases...)
	if mc.Fleet.RunDir != "" { // each model's worker logs and engine configs apart
		mc.Fleet.RunDir = filepath.Join(mc.Fleet.RunDir, strings.NewReplacer("/", "_", ":", "_").Replace(m.Name))
	}
	return mc, mc.Validate()
}

// checkModelNames checks the models' names and aliases, and the setting
// several models cannot share yet.
func checkModelNames(cfg Config) error {
	seen := map[string]int{}
	for i, m := range cfg.Models {
		for j, n := range append([]string{m.Name}, m.Aliases...) {
			key := fmt.Sprintf("models[%d].name", i)
			if j > 0 {
				key = fmt.Sprintf("models[%d].aliases[%d]", i, j-1)
			}
			switch first, dup := seen[n]; {
			case strings.TrimSpace(n) == "" || strings.ContainsAny(n, " \t\r\n"):
				return fmt.Errorf("config: %s: %q is not a model name (no spaces)", key, n)
			case dup:
				return fmt.Errorf("config: %s: %q is already a name of models[%d]", key, n, first)
			}
			seen[n] = i
		}
	}
	if len(cfg.Models) > 0 && cfg.Queue.RespectWorkerQueue {
		return fmt.Errorf("config: models: queue.respect_worker_queue scrapes one fleet: turn it off with models")
	}
	return nil
}
