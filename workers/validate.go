package workers

import (
	"fmt"
	"github.com/duet-serve/duet/workers/discovery"
	"net/url"
	"strconv"
	"strings"

	"github.com/duet-serve/duet/proto/disagg"
)

// pool is one worker pool with its place in the configuration.
type pool struct {
	key  string // configuration key: "context" or "generation"
	abbr string // worker name prefix: "ctx" or "gen"
	role disagg.Role
	cfg  PoolConfig
}

// pools returns the two pools, context first, with CountAuto resolved.
func (c Config) pools() []pool {
	return []pool{
		{key: "context", abbr: "ctx", role: disagg.RoleContext, cfg: c.Context.resolved()},
		{key: "generation", abbr: "gen", role: disagg.RoleGeneration, cfg: c.Generation.resolved()},
	}
}

// resolved returns p with a CountAuto count replaced by the count it means.
func (p PoolConfig) resolved() PoolConfig {
	if p.Count == CountAuto {
		p.Count = DefaultCount
		if len(p.URLs) > 0 {
			p.Count = 0
		}
	}
	return p
}

// Validate checks the configuration. The error names the offending key
// relative to the fleet section (e.g. `generation.count: must be >= 0, got
// -1`). GPU over-subscription is checked here only when gpus is listed; the
// default GPU list comes from the environment and is checked by NewPlan.
func (c Config) Validate() error {
	if err := c.validateTop(); err != nil {
		return err
	}
	pools := c.pools()
	for _, p := range pools {
		if err := p.cfg.validate(p.key); err != nil {
			return err
		}
	}
	if _, err := assignPorts(pools, ""); err != nil {
		return err
	}
	if len(c.GPUs) > 0 {
		if _, err := assignGPUs(c.GPUs, "gpus", c.AllowGPUSharing, pools); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) validateTop() error {
	if c.WorkersFileInterval <= 0 {
		return fmt.Errorf("workers_file_interval: must be > 0, got %s", c.WorkersFileInterval)
	}
	if c.EtcdInterval <= 0 {
		return fmt.Errorf("etcd_interval: must be > 0, got %s", c.EtcdInterval)
	}
	if c.EtcdURI != "" {
		if _, err := discovery.ParseEtcdURI(c.EtcdURI); err != nil {
			return fmt.Errorf("etcd_uri: %w", err)
		}
	}
	if c.Host == "" || strings.ContainsAny(c.Host, " \t/") {
		return fmt.Errorf("host: must be a host name or IP address, got %q", c.Host)
	}
	seen := map[string]int{}
	for i, g := range c.GPUs {
		if g == "" || strings.ContainsAny(g, " \t,") {
			return fmt.Errorf("gpus[%d]: must be a GPU index or UUID, got %q", i, g)
		}
		if j, dup := seen[g]; dup {
			return fmt.Errorf("gpus[%d]: %q already listed at gpus[%d]", i, g, j)
		}
		seen[g] = i
	}
	switch {
	case c.HealthInterval <= 0:
		return fmt.Errorf("health_interval: must be > 0, got %s", c.HealthInterval)
	case c.HealthTimeout <= 0:
		return fmt.Errorf("health_timeout: must be > 0, got %s", c.HealthTimeout)
	case c.UnhealthyThreshold < 1:
		return fmt.Errorf("unhealthy_threshold: must be >= 1, got %d", c.UnhealthyThreshold)
	case c.ShutdownGrace < 0:
		return fmt.Errorf("shutdown_grace: must be >= 0, got %s", c.ShutdownGrace)
	}
	return nil
}

// validate checks one pool; key is "context" or "generation".
func (p PoolConfig) validate(key string) error {
	fail := func(field, format string, args ...any) error {
		return fmt.Errorf("%s.%s: %s", key, field, fmt.Sprintf(format, args...))
	}
	info, ok := engines[p.Engine]
	if !ok {
		return fail("engine", "unknown engine %q (valid: %s)", p.Engine, strings.Join(Engines, ", "))
	}
	if p.Count < 0 {
		return fail("count", "must be >= 0, or -1 for %d (none when urls are listed), got %d", DefaultCount, p.Count)
	}
	if len(p.URLs) > 0 && p.Count > 0 {
		return fail("count", "must be 0 or unset when urls are listed, got %d (a pool is either launched by duet or pre-launched)", p.Count)
	}
	if err := validateURLs(key, p.URLs, key == "context"); err != nil {
		return err
	}
	if info.needsModel && p.Count > 0 && p.Model == "" {
		return fail("model", "required for engine %s", p.Engine)
	}
	if p.GPUsPerWorker < -1 {
		return fail("gpus_per_worker", "must be >= 0, or -1 for the engine default, got %d", p.GPUsPerWorker)
	}
	if err := p.validatePorts(key); err != nil {
		return err
	}
	if err := p.validateCommand(key); err != nil {
		return err
	}
	if !strings.HasPrefix(p.HealthPath, "/") {
		return fail("health_path", "must start with /, got %q", p.HealthPath)
	}
	if err := ValidateAdapterNames(p.LoraAdapters); err != nil {
		return fail("lora_adapters", "%v", err)
	}
	if p.StartTimeout < 0 {
		return fail("start_timeout", "must be >= 0 (0: engine default), got %s", p.StartTimeout)
	}
	if err := p.KVEvents.validate(key+".kv_events", p.Engine); err != nil {
		return err
	}
	if len(p.EngineConfig) > 0 && !info.engineConfig {
		return fail("engine_config", "not supported by engine %s (supported: %s, %s; use args)", p.Engine, EngineTRTLLM, EngineVLLM)
	}
	return p.Restart.validate(key + ".restart")
}

// validateURLs checks the pre-launched worker URLs of the pool key.
func validateURLs(key string, urls []string, bootstrapAllowed bool) error {
	seen := map[string]int{}
	for i, raw := range urls {
		u, port, err := ParseURLEntry(raw)
		if err != nil {
			return fmt.Errorf("%s.urls[%d]: %w", key, i, err)
		}
		if port != 0 && !bootstrapAllowed {
			return fmt.Errorf("%s.urls[%d]: a bootstrap port is for SGLang prefill (context) workers, got %q", key, i, raw)
		}
		if j, dup := seen[u.Host]; dup {
			return fmt.Errorf("%s.urls[%d]: %s already listed at urls[%d]", key, i, u.Host, j)
		}
		seen[u.Host] = i
	}
	return nil
}

// ParseURLEntry reads one urls entry: a base URL, optionally followed by
// whitespace and the worker's SGLang bootstrap port ("http://h:30000 8998",
// the form SGLang's router takes). bootstrapPort is 0 when the entry names
// none.
func ParseURLEntry(entry string) (base *url.URL, bootstrapPort int, err error) {
	fields := strings.Fields(entry)
	switch {
	case len(fields) == 0:
		return nil, 0, fmt.Errorf("empty entry")
	case len(fields) > 2:
		return nil, 0, fmt.Errorf("want \"URL\" or \"URL BOOTSTRAP_PORT\", got %q", entry)
	case len(fields) == 2:
		if bootstrapPort, err = parsePort(fields[1]); err != nil {
			return nil, 0, fmt.Errorf("bootstrap port: %w", err)
		}
	}
	u, err := url.Parse(fields[0])
	switch {
	case err != nil:
		return nil, 0, err
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, 0, fmt.Errorf("must be an http:// or https:// URL, got %q", fields[0])
	case u.Host == "":
		return nil, 0, fmt.Errorf("has no host: %q", fields[0])
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return nil, 0, fmt.Errorf("must be a base URL without path or query, got %q", fields[0])
	}
	return u, bootstrapPort, nil
}

func (p PoolConfig) validatePorts(key string) error {
	if p.Count == 0 {
		return nil
	}
	if len(p.Ports) == 0 {
		if err := portRange(p.BasePort, p.Count, 1); err != nil {
			return fmt.Errorf("%s.base_port: %w", key, err)
		}
	} else {
		if len(p.Ports) != p.Count {
			return fmt.Errorf("%s.ports: lists %d ports for count %d", key, len(p.Ports), p.Count)
		}
		for i, s := range p.Ports {
			if _, err := parsePort(s); err != nil {
				return fmt.Errorf("%s.ports[%d]: %w", key, i, err)
			}
		}
	}
	if engines[p.Engine].sidePorts {
		if err := portRange(p.SidePortBase, p.Count, p.sidePortStride()); err != nil {
			return fmt.Errorf("%s.side_port_base: %w", key, err)
		}
	}
	return nil
}

// portRange checks that base, base+stride, ... for count workers (each
// using stride ports) are valid ports.
func portRange(base, count, stride int) error {
	if base < 1 || base > 65535 {
		return fmt.Errorf("must be in 1..65535, got %d", base)
	}
	if last := base + count*stride - 1; last > 65535 {
		return fmt.Errorf("%d workers from %d need ports up to %d, above 65535", count, base, last)
	}
	return nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("not a port number: %q", s)
	}
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("must be in 1..65535, got %d", n)
	}
	return n, nil
}

func (p PoolConfig) validateCommand(key string) error {
	if p.Engine == EngineCommand {
		if p.Count > 0 && len(p.Command) == 0 {
			return fmt.Errorf("%s.command: required for engine command", key)
		}
		if len(p.Command) > 0 && strings.TrimSpace(p.Command[0]) == "" {
			return fmt.Errorf("%s.command[0]: the program must not be empty", key)
		}
	} else if len(p.Command) > 0 {
		return fmt.Errorf("%s.command: only used by engine command (engine is %s; use args or executable)", key, p.Engine)
	}
	lists := []struct {
		field string
		items []string
	}{{"command", p.Command}, {"args", p.Args}, {"env", p.Env}}
	for _, l := range lists {
		for i, s := range l.items {
			if ph := unknownPlaceholder(s); ph != "" {
				return fmt.Errorf("%s.%s[%d]: unknown placeholder %s (valid: %s)", key, l.field, i, ph, strings.Join(Placeholders, " "))
			}
		}
	}
	for i, kv := range p.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return fmt.Errorf("%s.env[%d]: want KEY=VALUE, got %q", key, i, kv)
		}
	}
	return nil
}

func (r RestartPolicy) validate(key string) error {
	switch {
	case r.Attempts < 0:
		return fmt.Errorf("%s.attempts: must be >= 0 (0: never restart), got %d", key, r.Attempts)
	case r.Attempts > 0 && r.Interval <= 0:
		return fmt.Errorf("%s.interval: must be > 0 when attempts > 0, got %s", key, r.Interval)
	case r.Delay < 0:
		return fmt.Errorf("%s.delay: must be >= 0, got %s", key, r.Delay)
	case r.MaxDelay < r.Delay:
		return fmt.Errorf("%s.max_delay: must be >= delay (%s), got %s", key, r.Delay, r.MaxDelay)
	case r.Jitter < 0 || r.Jitter > 1:
		return fmt.Errorf("%s.jitter: must be in [0, 1], got %g", key, r.Jitter)
	}
	return nil
}

// validate checks a pool's kv_events section; key is its path.
func (k KVEventsConfig) validate(key, engine string) error {
	switch {
	case k.PortOffset < -65535 || k.PortOffset > 65535:
		return fmt.Errorf("%s.port_offset: must be between -65535 and 65535, got %d", key, k.PortOffset)
	case k.ReplayPortOffset < -65535 || k.ReplayPortOffset > 65535:
		return fmt.Errorf("%s.replay_port_offset: must be between -65535 and 65535, got %d", key, k.ReplayPortOffset)
	case k.ReplayPortOffset != 0 && k.PortOffset == 0:
		return fmt.Errorf("%s.replay_port_offset: needs port_offset (the events themselves), got %d", key, k.ReplayPortOffset)
	case k.ReplayPortOffset != 0 && k.ReplayPortOffset == k.PortOffset:
		return fmt.Errorf("%s.replay_port_offset: must differ from port_offset (%d)", key, k.PortOffset)
	case k.PortOffset != 0 && engine == EngineTRTLLM:
		return fmt.Errorf("%s.port_offset: engine %s serves its KV events over HTTP (/kv_cache_events), which duet does not read yet; valid engines: %s, %s, %s, %s",
			key, engine, EngineSim, EngineVLLM, EngineSGLang, EngineCommand)
	}
	return nil
}
