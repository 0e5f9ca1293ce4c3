package main

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logConfig is the log: section.
type logConfig struct {
	// Level is the minimum level: debug, info, warn or error (default info).
	Level string `mapstructure:"level" help:"log level: debug, info, warn, error"`
	// Format is json or console (default console).
	Format string `mapstructure:"format" help:"log format: json or console"`
}

func defaultLogConfig() logConfig { return logConfig{Level: "info", Format: "console"} }

func (c logConfig) Validate() error {
	if _, err := zapcore.ParseLevel(c.Level); err != nil || c.Level == "" {
		return fmt.Errorf("level: unknown level %q (valid: debug, info, warn, error)", c.Level)
	}
	if c.Format != "json" && c.Format != "console" {
		return fmt.Errorf("format: unknown format %q (valid: json, console)", c.Format)
	}
	return nil
}

// newLogger builds an unsampled logger: duet's access log repeats one
// message per request and zap's default sampling would drop most lines.
func newLogger(c logConfig) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, err
	}
	zc := zap.NewProductionConfig()
	if c.Format == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.Development = false
		zc.DisableStacktrace = true
	}
	zc.Sampling = nil
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.OutputPaths = []string{"stderr"}
	return zc.Build()
}
