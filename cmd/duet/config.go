package main

import (
	"fmt"
	"strings"

	"github.com/duet-serve/duet/orchestrator"
	"github.com/duet-serve/duet/orchestrator/frontend"
	"github.com/duet-serve/duet/orchestrator/queue"
	"github.com/duet-serve/duet/orchestrator/tenant"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/router/redisstore"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/duet-serve/duet/workers"
	"github.com/duet-serve/duet/workers/sim"
	"github.com/spf13/viper"
)

// Config is the whole duet configuration file. Each section belongs to the
// package that uses it; see that package's Config for the keys.
type Config struct {
	Log          logConfig           `mapstructure:"log"`
	Tracing      tracingConfig       `mapstructure:"tracing"`
	Server       frontend.Config     `mapstructure:"server"`
	Orchestrator orchestrator.Config `mapstructure:"orchestrator"`
	Queue        queue.Config        `mapstructure:"queue"`
	Tenants      tenant.Config       `mapstructure:"tenants"`
	Router       router.Config       `mapstructure:"router"`
	Cluster      redisstore.Config   `mapstructure:"cluster"`
	Tokenizer    tokenizer.Config    `mapstructure:"tokenizer"`
	Fleet        workers.Config      `mapstructure:"fleet"`
	Sim          sim.Config          `mapstructure:"sim"`
	// Models, when set, are several models, each with its own fleet
	// (models.go); the top-level sections hold what they share.
	Models []modelConfig `mapstructure:"models" doc:"several models behind one duet, each with its own fleet; the top-level sections hold what they share"`

	// resolved is each model's whole configuration (models set), or nil.
	resolved []Config
}

// defaultConfig returns every section's defaults.
func defaultConfig() Config {
	return Config{
		Log:          defaultLogConfig(),
		Tracing:      defaultTracingConfig(),
		Server:       frontend.Defaults(),
		Orchestrator: orchestrator.Defaults(),
		Queue:        queue.Defaults(),
		Tenants:      tenant.Defaults(),
		Router:       router.Defaults(),
		Cluster:      redisstore.Defaults(),
		Tokenizer:    tokenizer.Defaults(),
		Fleet:        workers.Defaults(),
		Sim:          sim.Defaults(),
	}
}

// validator is what every section implements.
type validator interface{ Validate() error }

// Validate checks every section; the error names the full key.
func (c Config) Validate() error {
	sections := []struct {
		name string
		v    validator
	}{
		{"log", c.Log},
		{"tracing", c.Tracing},
		{"server", c.Server},
		{"orchestrator", c.Orchestrator},
		{"queue", c.Queue},
		{"tenants", c.Tenants},
		{"router", c.Router},
		{"cluster", c.Cluster},
		{"tokenizer", c.Tokenizer},
		{"fleet", c.Fleet},
		{"sim", c.Sim},
	}
	for _, s := range sections {
		if err := s.v.Validate(); err != nil {
			return fmt.Errorf("config: %s.%w", s.name, err)
		}
	}
	return c.checkTenantClasses()
}

// checkTenantClasses checks that every tenant's class is a queue class,
// and that the queue that orders by class is on.
func (c Config) checkTenantClasses() error {
	for i, t := range c.Tenants.Tenants {
		switch {
		case t.Class == "":
		case !c.Queue.Enabled:
			return fmt.Errorf("config: tenants.list[%d].class: priority classes need the admission queue (queue.enabled: true)", i)
		case !c.Queue.HasClass(t.Class):
			return fmt.Errorf("config: tenants.list[%d].class: %q is not a queue class (valid: %s)", i, t.Class,
				strings.Join(c.Queue.ClassNames(), ", "))
		}
	}
	return nil
}

// loadConfig reads the configuration: flags bound to v win over DUET_*
// environment variables, which win over the YAML (from path, or yaml when
// path is empty and yaml is not nil), which wins over the defaults. Unknown
// keys are errors naming the key and the valid ones beside it.
func loadConfig(v *viper.Viper, path string, yaml []byte) (Config, error) {
	defaults := defaultConfig()
	setDefaults(v, "", defaults)
	v.SetEnvPrefix("DUET")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if err := readYAML(v, path, yaml); err != nil {
		return Config{}, err
	}
	if err := checkUnknownKeys(v.AllKeys(), schemaOf(defaults)); err != nil {
		return Config{}, err
	}
	var cfg Config
	if err := v.UnmarshalExact(&cfg, decodeHooks()); err != nil {
		return Config{}, fmt.Errorf("config: %w", decodeError(err))
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	if len(cfg.Models) > 0 {
		resolved, err := resolveModels(v, cfg)
		if err != nil {
			return Config{}, err
		}
		cfg.resolved = resolved
	}
	return cfg, nil
}

func readYAML(v *viper.Viper, path string, yaml []byte) error {
	v.SetConfigType("yaml")
	switch {
	case path != "":
		v.SetConfigFile(path)
		if err := v.ReadInConfig(); err != nil {
			return fmt.Errorf("config: read %s: %w", path, err)
		}
	case yaml != nil:
		if err := v.ReadConfig(strings.NewReader(string(yaml))); err != nil {
			return fmt.Errorf("config: embedded default: %w", err)
		}
	}
	return nil
}
