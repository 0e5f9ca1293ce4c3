package router

import "fmt"

// Config is the router: section.
type Config struct {
	// Policy picks workers: round-robin or least-load (default least-load).
	Policy string `mapstructure:"policy" help:"routing policy: round-robin or least-load"`
}

// Defaults returns the default configuration.
func Defaults() Config { return Config{Policy: PolicyLeastLoad} }

// Validate checks the configuration; errors name the key.
func (c Config) Validate() error {
	if _, err := NewPolicy(c.Policy); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	return nil
}
