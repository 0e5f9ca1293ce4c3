package main

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// tracingConfig is the tracing: section: OpenTelemetry traces of every
// request, sent over OTLP/HTTP.
type tracingConfig struct {
	// OTLPEndpoint is the collector's OTLP/HTTP base URL, e.g.
	// http://127.0.0.1:4318 (spans go to its /v1/traces); "" turns tracing
	// off (the default).
	OTLPEndpoint string `mapstructure:"otlp_endpoint" help:"OTLP/HTTP collector base URL for request traces, e.g. http://127.0.0.1:4318 (empty: tracing off)"`
	// ServiceName is the service.name of duet's spans (default duet).
	ServiceName string `mapstructure:"service_name" help:"service.name of duet's spans"`
	// SampleRatio is the share of requests traced when the client's
	// traceparent does not decide (default 1).
	SampleRatio float64 `mapstructure:"sample_ratio" help:"share of requests traced when the client's traceparent does not decide"`
}

func defaultTracingConfig() tracingConfig { return tracingConfig{ServiceName: "duet", SampleRatio: 1} }

func (c tracingConfig) Validate() error {
	if c.OTLPEndpoint != "" {
		if _, err := tracesURL(c.OTLPEndpoint); err != nil {
			return err
		}
	}
	switch {
	case c.ServiceName == "":
		return fmt.Errorf("service_name: must not be empty")
	case c.SampleRatio < 0 || c.SampleRatio > 1:
		return fmt.Errorf("sample_ratio: must be in [0, 1], got %g", c.SampleRatio)
	}
	return nil
}

// tracesURL is the collector's traces URL: the base URL's /v1/traces
// unless it names a path.
func tracesURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("otlp_endpoint: must be an http:// or https:// URL, got %q", base)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// startTracing returns the tracer requests are traced with (nil when
// tracing is off) and a function that flushes and stops it.
func startTracing(ctx context.Context, cfg tracingConfig, log *zap.Logger) (trace.Tracer, func(), error) {
	if cfg.OTLPEndpoint == "" {
		return nil, func() {}, nil
	}
	endpoint, _ := tracesURL(cfg.OTLPEndpoint) // validated with the config
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("config: tracing.otlp_endpoint: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName))),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))))
	log.Info("tracing requests", zap.String("otlp", endpoint), zap.Float64("sample_ratio", cfg.SampleRatio))
	return tp.Tracer("github.com/duet-serve/duet"), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("flushing traces", zap.Error(err))
		}
	}, nil
}
