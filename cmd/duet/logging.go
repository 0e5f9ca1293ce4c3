package main

import (
	"fmt"
	"os"
	"time"

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
	zc, err := zapConfig(c)
	if err != nil {
		return nil, err
	}
	return zc.Build()
}

// Access log buffering: lines wait in memory until accessFlushInterval
// has passed or accessBufferBytes are waiting.
const (
	accessFlushInterval = time.Second
	accessBufferBytes   = 256 << 10
)

// newAccessLogger builds the access logger, named "access": the format
// and level of newLogger, unsampled, written to stderr through a buffer,
// so that a request does not cost a write to stderr of its own (a system
// call per request, which at a few thousand requests per second is a
// measurable share of duet's CPU). A line reaches stderr within
// accessFlushInterval; stop flushes what is waiting and must be called
// before the process exits.
func newAccessLogger(c logConfig) (log *zap.Logger, stop func(), err error) {
	zc, err := zapConfig(c)
	if err != nil {
		return nil, nil, err
	}
	ws := &zapcore.BufferedWriteSyncer{WS: zapcore.Lock(os.Stderr), Size: accessBufferBytes, FlushInterval: accessFlushInterval}
	enc := zapcore.NewJSONEncoder(zc.EncoderConfig)
	if zc.Encoding == "console" {
		enc = zapcore.NewConsoleEncoder(zc.EncoderConfig)
	}
	log = zap.New(zapcore.NewCore(enc, ws, zc.Level)).Named("access")
	return log, func() { _ = ws.Stop() }, nil
}

// zapConfig is the zap configuration of c, unsampled, to stderr.
func zapConfig(c logConfig) (zap.Config, error) {
	level, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return zap.Config{}, err
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
	return zc, nil
}
