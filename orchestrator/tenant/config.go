package tenant

import (
	"fmt"
	"strings"
	"time"

	"github.com/duet-serve/duet/orchestrator/internal/names"
)

// Config is the tenants: section.
type Config struct {
	// Header names a request header, set by a gateway in front of duet,
	// that carries the tenant's name (default "": tenants are identified
	// by their API key, `Authorization: Bearer KEY`).
	Header string `mapstructure:"header" help:"header naming the tenant, set by a gateway in front (empty: the API key identifies it)"`
	// RequireKey refuses (401) requests that no tenant claims: no key, an
	// unknown key, or an unknown name in Header (default false: such
	// requests are served without tenant limits).
	RequireKey bool `mapstructure:"require_key" help:"refuse requests no tenant claims (401)"`
	// Burst is how much of a token rate a tenant may spend at once: each
	// bucket holds this long's worth of tokens (default 10s).
	Burst time.Duration `mapstructure:"burst" help:"a tenant's token buckets hold this long's worth of its rates"`
	// Tenants are the tenants (default none).
	Tenants []Spec `mapstructure:"list" doc:"the tenants"`
}

// Spec is one tenant of tenants.list.
type Spec struct {
	// Name names the tenant in metrics, logs and the Header.
	Name string `mapstructure:"name" doc:"the tenant's name, in metrics, logs and tenants.header (letters, digits, ., _ and -, at most 64)"`
	// APIKeys are the keys that identify the tenant.
	APIKeys []string `mapstructure:"api_keys" doc:"keys that identify the tenant as Authorization: Bearer KEY (at least 8 characters; each key one tenant's)"`
	// Class is the queue priority class of its requests ("": the queue's
	// default_class); a request's X-Duet-Priority may lower it, never
	// raise it.
	Class string `mapstructure:"class" doc:"highest queue priority class of its requests (empty: queue default_class)"`
	// InputTokensPerMinute limits the prompt tokens admitted (0: no limit).
	InputTokensPerMinute int `mapstructure:"input_tokens_per_minute" doc:"prompt tokens admitted per minute (0: no limit)"`
	// OutputTokensPerMinute limits the tokens generated (0: no limit).
	OutputTokensPerMinute int `mapstructure:"output_tokens_per_minute" doc:"tokens generated per minute (0: no limit)"`
	// MaxConcurrency limits the tenant's requests in flight (0: no limit).
	MaxConcurrency int `mapstructure:"max_concurrency" doc:"requests in flight (0: no limit)"`
	// IsolateCache keeps the tenant's prompts out of every other tenant's
	// cache credit: its session keys and block hashes are its own.
	IsolateCache bool `mapstructure:"isolate_cache" doc:"no cache credit shared with other tenants"`
}

// Defaults returns the default configuration: no tenants.
func Defaults() Config { return Config{Burst: 10 * time.Second} }

// maxRate bounds a per-minute limit so that bucket arithmetic stays exact.
const maxRate = 1 << 40

// Validate checks the configuration; errors name the key relative to the
// section. classes are the queue's priority classes.
func (c Config) Validate() error {
	if c.Header != "" && !names.Header(c.Header) {
		return fmt.Errorf("header: %q is not a header name", c.Header)
	}
	if c.Burst < time.Second {
		return fmt.Errorf("burst: must be >= 1s, got %s", c.Burst)
	}
	names, keys := map[string]bool{}, map[string]string{}
	for i, s := range c.Tenants {
		at := fmt.Sprintf("list[%d]", i)
		if err := s.validate(); err != nil {
			return fmt.Errorf("%s.%w", at, err)
		}
		if names[s.Name] {
			return fmt.Errorf("%s.name: %q is listed twice", at, s.Name)
		}
		names[s.Name] = true
		for _, k := range s.APIKeys {
			if other, dup := keys[k]; dup {
				return fmt.Errorf("%s.api_keys: a key of %q is also a key of %q", at, s.Name, other)
			}
			keys[k] = s.Name
		}
	}
	if c.RequireKey && len(c.Tenants) == 0 {
		return fmt.Errorf("require_key: no tenant is listed in list, every request would be refused")
	}
	return nil
}

func (s Spec) validate() error {
	switch {
	case !names.Label(s.Name, 64, "._-"):
		return fmt.Errorf("name: %q is not a tenant name (letters, digits, '.', '_' and '-', at most 64)", s.Name)
	case s.InputTokensPerMinute < 0 || s.InputTokensPerMinute > maxRate:
		return fmt.Errorf("input_tokens_per_minute: must be in [0, %d], got %d", maxRate, s.InputTokensPerMinute)
	case s.OutputTokensPerMinute < 0 || s.OutputTokensPerMinute > maxRate:
		return fmt.Errorf("output_tokens_per_minute: must be in [0, %d], got %d", maxRate, s.OutputTokensPerMinute)
	case s.MaxConcurrency < 0:
		return fmt.Errorf("max_concurrency: must be >= 0, got %d", s.MaxConcurrency)
	}
	for _, k := range s.APIKeys {
		if len(k) < 8 || strings.ContainsAny(k, " \t\r\n") {
			return fmt.Errorf("api_keys: a key must be at least 8 characters without spaces")
		}
	}
	return nil
}
