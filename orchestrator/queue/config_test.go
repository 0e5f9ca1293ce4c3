package queue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	require.NoError(t, Defaults().Validate())
	cases := []struct {
		name string
		edit func(*Config)
		err  string
	}{
		{"fairness", func(c *Config) { c.Fairness = "x" }, `fairness: unknown mode "x" (valid: none, user, tenant)`},
		{"inflight", func(c *Config) { c.InflightPerWorker = 0 }, "inflight_per_worker: must be >= 1, got 0"},
		{"boost ttl", func(c *Config) { c.SessionBoostTTL = -time.Second }, "session_boost_ttl: must be >= 0, got -1s"},
		{"boost sessions", func(c *Config) { c.BoostSessions = 0 }, "boost_sessions: must be >= 1, got 0"},
		{"half-life", func(c *Config) { c.FairnessHalfLife = 0 }, "fairness_half_life: must be > 0, got 0s"},
		{"grace", func(c *Config) { c.GracePeriod = -1 }, "grace_period: must be >= 0, got -1ns"},
		{"queue length", func(c *Config) { c.MaxQueueLength = -1 }, "max_queue_length: must be >= 0, got -1"},
		{"max wait", func(c *Config) { c.MaxWait = 0 }, "max_wait: must be > 0, got 0s"},
		{"scrape interval", func(c *Config) { c.ScrapeInterval = 0 }, "scrape_interval: must be > 0, got 0s"},
		{"staleness", func(c *Config) { c.MetricsStaleness = 0 }, "metrics_staleness: must be > 0, got 0s"},
		{"staleness below interval", func(c *Config) { c.RespectWorkerQueue, c.MetricsStaleness = true, 500*time.Millisecond },
			"metrics_staleness: must be >= scrape_interval (1s) with respect_worker_queue, got 500ms"},
		{"user header", func(c *Config) { c.UserHeader = "X User" }, `user_header: "X User" is not a header name`},
		{"metric name", func(c *Config) { c.WaitingMetric = "9waiting" }, `waiting_metric: "9waiting" is not a Prometheus metric name`},
		{"empty metric", func(c *Config) { c.WaitingMetric = "" }, `waiting_metric: "" is not a Prometheus metric name`},
		{"no classes", func(c *Config) { c.Classes = nil }, "classes: at least one class is needed"},
		{"class name", func(c *Config) { c.Classes[1].Name = "a b" },
			`classes[1].name: "a b" is not a class name (letters, digits, '_' and '-', at most 32)`},
		{"class twice", func(c *Config) { c.Classes[2].Name = "high" }, `classes[2].name: "high" is listed twice`},
		{"class max wait", func(c *Config) { c.Classes[0].MaxWait = -time.Second }, "classes[0].max_wait: must be >= 0, got -1s"},
		{"max share", func(c *Config) { c.Classes[2].MaxShare = 1.5 }, "classes[2].max_share: must be in (0, 1] (0: 1), got 1.5"},
		{"share above a higher class", func(c *Config) { c.Classes[1].MaxShare, c.Classes[2].MaxShare = 0.5, 0.6 },
			"classes[2].max_share: 0.6 is above the share of the higher class normal (0.5)"},
		{"default class", func(c *Config) { c.DefaultClass = "urgent" }, `default_class: "urgent" is not a class (valid: high, normal, low)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Defaults()
			c.edit(&cfg)
			require.EqualError(t, cfg.Validate(), c.err)
		})
	}
	ok := Defaults()
	ok.SessionBoostTTL, ok.GracePeriod, ok.MaxQueueLength = 0, 0, 0
	ok.UserHeader, ok.WaitingMetric, ok.Fairness = "X-User-ID", "sglang:num_queue_reqs", FairnessUser
	require.NoError(t, ok.Validate(), "zero means off; other engines' gauges")
}

func TestConfigUser(t *testing.T) {
	header := func(name string) string { return map[string]string{"X-User": "alice"}[name] }
	c := Defaults()
	require.Equal(t, "bob", c.User(header, "bob", "acme"))
	c.UserHeader = "X-User"
	require.Equal(t, "alice", c.User(header, "bob", "acme"))
	c.Fairness = FairnessTenant
	require.Equal(t, "acme", c.User(header, "bob", "acme"), "the tenant, whatever the user")
	require.Empty(t, c.User(header, "bob", ""), "requests no tenant claims share one bucket")
}
