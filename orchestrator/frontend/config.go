package frontend

import (
	"fmt"
	"net"
	"time"
)

// Config is the server: section.
type Config struct {
	// Host is the listen address (default 127.0.0.1).
	Host string `mapstructure:"host" help:"listen address"`
	// Port is the listen port (default 8000).
	Port int `mapstructure:"port" help:"listen port"`
	// MaxBodyBytes is the largest request body; larger ones get 413
	// (default 8 MiB).
	MaxBodyBytes int `mapstructure:"max_body_bytes" help:"largest request body in bytes (413 above)"`
	// MaxHeaderBytes is the largest request header block; larger ones get
	// 431 (default 16 KiB).
	MaxHeaderBytes int `mapstructure:"max_header_bytes" help:"largest request header block in bytes (431 above)"`
	// ReadTimeout bounds reading one request (default 60s). Responses have
	// no write deadline: streams are bounded by the orchestrator's limits.
	ReadTimeout time.Duration `mapstructure:"read_timeout" help:"time limit to read one request"`
	// IdleTimeout closes keep-alive connections idle this long (default 120s).
	IdleTimeout time.Duration `mapstructure:"idle_timeout" help:"keep-alive idle timeout"`
	// MaxConcurrency bounds concurrent connections served (default 16384).
	MaxConcurrency int `mapstructure:"max_concurrency" help:"concurrent connections served"`
	// AdminToken enables the admin API (/admin/workers) for requests with
	// "Authorization: Bearer <token>" (default "": disabled). Prefer the
	// DUET_SERVER_ADMIN_TOKEN environment variable to a file.
	AdminToken string `mapstructure:"admin_token" doc:"bearer token of the admin API (empty: the admin API is off); better set through DUET_SERVER_ADMIN_TOKEN"`
	// DebugAddress serves Go's profiler (net/http/pprof, /debug/pprof/) on
	// its own listener at host:port (default "": off). It exposes stacks
	// and memory: keep it on a loopback or private address.
	DebugAddress string `mapstructure:"debug_address" help:"host:port serving /debug/pprof/ (empty: off; keep it private)"`
}

// Defaults returns the default configuration.
func Defaults() Config {
	return Config{Host: "127.0.0.1", Port: 8000, MaxBodyBytes: 8 << 20, MaxHeaderBytes: 16 << 10,
		ReadTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxConcurrency: 16384}
}

// Validate checks the configuration; errors name the key.
func (c Config) Validate() error {
	switch {
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("port: must be in [0, 65535], got %d", c.Port)
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("max_body_bytes: must be >= 1024, got %d", c.MaxBodyBytes)
	case c.MaxHeaderBytes < 4096:
		return fmt.Errorf("max_header_bytes: must be >= 4096, got %d", c.MaxHeaderBytes)
	case c.ReadTimeout <= 0:
		return fmt.Errorf("read_timeout: must be > 0, got %s", c.ReadTimeout)
	case c.IdleTimeout <= 0:
		return fmt.Errorf("idle_timeout: must be > 0, got %s", c.IdleTimeout)
	case c.MaxConcurrency < 1:
		return fmt.Errorf("max_concurrency: must be >= 1, got %d", c.MaxConcurrency)
	}
	if c.DebugAddress != "" {
		if _, _, err := net.SplitHostPort(c.DebugAddress); err != nil {
			return fmt.Errorf("debug_address: must be host:port or empty, got %q", c.DebugAddress)
		}
	}
	return nil
}
