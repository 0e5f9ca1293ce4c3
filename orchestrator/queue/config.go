package queue

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/duet-serve/duet/orchestrator/internal/names"
)

// Fairness modes of the normal class.
const (
	// FairnessNone serves the normal class first in, first out.
	FairnessNone = "none"
	// FairnessUser serves the normal class by least recent token usage of
	// the request's user, then first in, first out.
	FairnessUser = "user"
	// FairnessTenant is FairnessUser with the request's tenant (tenants:)
	// in place of its user: one tenant's burst does not hold the others'
	// requests back.
	FairnessTenant = "tenant"
)

// fairnessModes lists the valid fairness modes, for error messages.
var fairnessModes = []string{FairnessNone, FairnessUser, FairnessTenant}

// Config is the queue: section.
type Config struct {
	// Enabled turns the admission queue on (default false: Acquire admits
	// every request at once and keeps no state).
	Enabled bool `mapstructure:"enabled" help:"turn the admission queue on"`
	// InflightPerWorker is how many admitted requests each available worker
	// of the gating role adds to a key's capacity (default 64).
	InflightPerWorker int `mapstructure:"inflight_per_worker" help:"admitted requests per available worker"`
	// SessionBoostTTL is how long after a session's turn completed its next
	// turn is boosted ahead of other work (default 60s; 0 turns boosting
	// off).
	SessionBoostTTL time.Duration `mapstructure:"session_boost_ttl" help:"a session's next turn is boosted this long after a turn completed (0: off)"`
	// BoostSessions bounds the sessions whose completion time is
	// remembered; the oldest completion is forgotten beyond it (default
	// 100000).
	BoostSessions int `mapstructure:"boost_sessions" help:"sessions remembered for boosting (oldest forgotten beyond)"`
	// Fairness orders the normal turns of a class: none (FIFO, default),
	// user (least recent token usage per user first; usage is counted at
	// admission, across keys) or tenant (the same per tenant).
	Fairness string `mapstructure:"fairness" help:"order of non-boosted requests: none (FIFO), user or tenant (least recent usage first)"`
	// FairnessHalfLife is the half-life of the per-user token usage that
	// fairness: user orders by (default 60s).
	FairnessHalfLife time.Duration `mapstructure:"fairness_half_life" help:"half-life of per-user token usage for fairness: user"`
	// UserHeader names the request header that identifies the user for
	// fairness (default "": the body's user field). The caller reads it;
	// see Config.User.
	UserHeader string `mapstructure:"user_header" help:"header naming the user for fairness (empty: the body's user field)"`
	// GracePeriod holds a slot freed by a completed turn for that session's
	// next turn this long (default 0 = off).
	GracePeriod time.Duration `mapstructure:"grace_period" help:"hold a completed turn's slot for the session's next turn this long (0: off)"`
	// MaxQueueLength bounds the requests waiting per key; beyond it a
	// request is rejected at once (default 1024; 0 never waits).
	MaxQueueLength int `mapstructure:"max_queue_length" help:"requests waiting per key before new ones are rejected (0: never wait)"`
	// MaxWait bounds a request's wait; it is rejected after it (default
	// 30s).
	MaxWait time.Duration `mapstructure:"max_wait" help:"longest wait in the queue before a request is rejected"`
	// RespectWorkerQueue makes a worker whose scraped waiting-queue gauge is
	// above zero add no capacity (default false).
	RespectWorkerQueue bool `mapstructure:"respect_worker_queue" help:"count no capacity on workers whose own queue is not empty"`
	// ScrapeInterval is the period of Run's round: scraping workers'
	// /metrics (with respect_worker_queue) and a backstop admission pass
	// (default 1s).
	ScrapeInterval time.Duration `mapstructure:"scrape_interval" help:"period of worker metrics scrapes and backstop admission"`
	// MetricsStaleness is the age beyond which a scraped gauge is ignored
	// and the worker counts as having room (default 5s).
	MetricsStaleness time.Duration `mapstructure:"metrics_staleness" help:"age beyond which a scraped worker gauge is ignored"`
	// WaitingMetric is the worker gauge of requests waiting in the engine
	// (default vllm:num_requests_waiting); samples of every label set are
	// summed.
	WaitingMetric string `mapstructure:"waiting_metric" help:"worker gauge of requests waiting in the engine"`
	// Classes are the priority classes, highest first (default high,
	// normal, low). A key's waiters of a higher class are always admitted
	// before those of a lower one; see priority.go.
	Classes []Class `mapstructure:"classes" doc:"priority classes, highest first; higher classes are admitted first, the lowest shed first under overload"`
	// DefaultClass is the class of a request that names none (default
	// normal).
	DefaultClass string `mapstructure:"default_class" help:"priority class of requests that name none"`
}

// Class is one priority class of queue.classes.
type Class struct {
	// Name is what requests and tenants call the class (a metric label).
	Name string `mapstructure:"name" doc:"the class's name, used by X-Duet-Priority and tenants (letters, digits, _ and -, at most 32)"`
	// MaxWait is the longest a request of the class waits (0: queue
	// max_wait). A waiting request whose predicted wait exceeds it is
	// shed at once with 429, lowest class first.
	MaxWait time.Duration `mapstructure:"max_wait" doc:"longest wait of a request of the class (0: queue max_wait); a request predicted to wait longer is shed with 429"`
	// MaxShare is the fraction of a key's capacity that requests may
	// occupy when one of this class is admitted (0: 1, all of it). Below 1
	// it keeps headroom for the higher classes, so that their requests find
	// a free slot at once instead of waiting for one to be released. A
	// class's share may not exceed a higher class's.
	MaxShare float64 `mapstructure:"max_share" doc:"share of the capacity requests may occupy when one of the class is admitted, in (0, 1] (0: 1); headroom for higher classes"`
}

// Defaults returns the default configuration.
func Defaults() Config {
	return Config{
		InflightPerWorker: 64,
		SessionBoostTTL:   60 * time.Second,
		BoostSessions:     100000,
		Fairness:          FairnessNone,
		FairnessHalfLife:  60 * time.Second,
		MaxQueueLength:    1024,
		MaxWait:           30 * time.Second,
		ScrapeInterval:    time.Second,
		MetricsStaleness:  5 * time.Second,
		WaitingMetric:     "vllm:num_requests_waiting",
		Classes:           []Class{{Name: "high"}, {Name: "normal"}, {Name: "low"}},
		DefaultClass:      "normal",
	}
}

// Validate checks the configuration; errors name the key relative to the
// section. A disabled section is checked too, so that turning it on cannot
// surface an old mistake.
func (c Config) Validate() error {
	if !slices.Contains(fairnessModes, c.Fairness) {
		return fmt.Errorf("fairness: unknown mode %q (valid: %s)", c.Fairness, strings.Join(fairnessModes, ", "))
	}
	nonNegative := []struct {
		key string
		d   time.Duration
	}{{"session_boost_ttl", c.SessionBoostTTL}, {"grace_period", c.GracePeriod}}
	for _, p := range nonNegative {
		if p.d < 0 {
			return fmt.Errorf("%s: must be >= 0, got %s", p.key, p.d)
		}
	}
	positive := []struct {
		key string
		d   time.Duration
	}{{"fairness_half_life", c.FairnessHalfLife}, {"max_wait", c.MaxWait},
		{"scrape_interval", c.ScrapeInterval}, {"metrics_staleness", c.MetricsStaleness}}
	for _, p := range positive {
		if p.d <= 0 {
			return fmt.Errorf("%s: must be > 0, got %s", p.key, p.d)
		}
	}
	switch {
	case c.InflightPerWorker < 1:
		return fmt.Errorf("inflight_per_worker: must be >= 1, got %d", c.InflightPerWorker)
	case c.BoostSessions < 1:
		return fmt.Errorf("boost_sessions: must be >= 1, got %d", c.BoostSessions)
	case c.MaxQueueLength < 0:
		return fmt.Errorf("max_queue_length: must be >= 0, got %d", c.MaxQueueLength)
	case c.UserHeader != "" && !names.Header(c.UserHeader):
		return fmt.Errorf("user_header: %q is not a header name", c.UserHeader)
	case !validMetricName(c.WaitingMetric):
		return fmt.Errorf("waiting_metric: %q is not a Prometheus metric name", c.WaitingMetric)
	case c.RespectWorkerQueue && c.MetricsStaleness < c.ScrapeInterval:
		return fmt.Errorf("metrics_staleness: must be >= scrape_interval (%s) with respect_worker_queue, got %s",
			c.ScrapeInterval, c.MetricsStaleness)
	}
	return c.validateClasses()
}

// validateClasses checks classes and default_class.
func (c Config) validateClasses() error {
	if len(c.Classes) == 0 {
		return fmt.Errorf("classes: at least one class is needed")
	}
	seen := map[string]bool{}
	for i, cl := range c.Classes {
		switch {
		case !names.Label(cl.Name, 32, "_-"):
			return fmt.Errorf("classes[%d].name: %q is not a class name (letters, digits, '_' and '-', at most 32)", i, cl.Name)
		case seen[cl.Name]:
			return fmt.Errorf("classes[%d].name: %q is listed twice", i, cl.Name)
		case cl.MaxWait < 0:
			return fmt.Errorf("classes[%d].max_wait: must be >= 0, got %s", i, cl.MaxWait)
		case cl.MaxShare < 0 || cl.MaxShare > 1:
			return fmt.Errorf("classes[%d].max_share: must be in (0, 1] (0: 1), got %g", i, cl.MaxShare)
		case i > 0 && c.classShare(i) > c.classShare(i-1):
			return fmt.Errorf("classes[%d].max_share: %g is above the share of the higher class %s (%g)",
				i, c.classShare(i), c.Classes[i-1].Name, c.classShare(i-1))
		}
		seen[cl.Name] = true
	}
	if !seen[c.DefaultClass] {
		return fmt.Errorf("default_class: %q is not a class (valid: %s)", c.DefaultClass, strings.Join(c.ClassNames(), ", "))
	}
	return nil
}

// ClassNames lists the priority classes, highest first.
func (c Config) ClassNames() []string {
	names := make([]string, len(c.Classes))
	for i, cl := range c.Classes {
		names[i] = cl.Name
	}
	return names
}

// HasClass reports whether name is one of the priority classes.
func (c Config) HasClass(name string) bool {
	for _, cl := range c.Classes {
		if cl.Name == name {
			return true
		}
	}
	return false
}

// classMaxWait returns the max_wait of class i.
func (c Config) classMaxWait(i int) time.Duration {
	if d := c.Classes[i].MaxWait; d > 0 {
		return d
	}
	return c.MaxWait
}

// classShare returns the max_share of class i.
func (c Config) classShare(i int) float64 {
	if s := c.Classes[i].MaxShare; s > 0 {
		return s
	}
	return 1
}

// User returns whom a request is charged to for fairness: its tenant
// with fairness: tenant ("" for none), else the value of the configured
// user_header when set (header returns "" for an absent header), else
// bodyUser, the body's user field.
func (c Config) User(header func(name string) string, bodyUser, tenant string) string {
	if c.Fairness == FairnessTenant {
		return tenant
	}
	if c.UserHeader != "" {
		return header(c.UserHeader)
	}
	return bodyUser
}

// validMetricName reports whether s matches [a-zA-Z_:][a-zA-Z0-9_:]*.
func validMetricName(s string) bool {
	for i, r := range s {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_' || r == ':'
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return s != ""
}
