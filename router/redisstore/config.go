package redisstore

import (
	"fmt"
	"net"
	"time"
)

// State names accepted in cluster.state.
const (
	StateLocal = "local" // one replica's own memory (the default)
	StateRedis = "redis" // shared by every replica through Redis
)

// Config is the `cluster:` section: where the router keeps the state
// several duet replicas must share.
type Config struct {
	// State is local (default: sessions, prefix index and load live in this
	// process) or redis (every replica pointed at the same Redis shares
	// them).
	State string `mapstructure:"state" help:"router state: local (this process) or redis (shared by every replica)"`
	// LoadInterval is the longest a replica goes without publishing its
	// load per worker and reading the others' (default 250ms): every call
	// to Redis does both (a routing call, a write batch), so under traffic
	// the replicas' loads are as fresh as their requests, and the replica
	// makes a call of its own only after this long without one (the
	// heartbeat). It also paces the reconnection attempts while Redis is
	// down and the reading of admin changes.
	LoadInterval time.Duration `mapstructure:"load_interval" help:"longest time between two publications of a replica's load (every call to Redis is one)"`
	// LoadTTL is how long a replica's published load counts after its last
	// publication: a replica that stops drops out after it (default 1s).
	LoadTTL time.Duration `mapstructure:"load_ttl" help:"a replica that stops publishing drops out of the summed load after this long"`
	// Redis is the store, with state: redis.
	Redis RedisConfig `mapstructure:"redis"`
}

// RedisConfig is the `cluster.redis:` section.
type RedisConfig struct {
	// Address is the Redis server, host:port (default 127.0.0.1:6379).
	Address string `mapstructure:"address" help:"Redis server host:port"`
	// Password authenticates to Redis ("" for none); better set through
	// DUET_CLUSTER_REDIS_PASSWORD than in a file.
	Password string `mapstructure:"password" doc:"Redis password (empty: none); better set through DUET_CLUSTER_REDIS_PASSWORD"`
	// DB is the Redis database number (default 0).
	DB int `mapstructure:"db" help:"Redis database number"`
	// KeyPrefix starts every key duet writes (default "duet:"): replicas
	// with the same prefix share state; another prefix is another cluster.
	KeyPrefix string `mapstructure:"key_prefix" help:"prefix of every Redis key (replicas with the same prefix share state)"`
	// Timeout bounds each call, including the one on a request's routing
	// path (default 25ms); a call that takes longer routes the request on
	// local state and marks the store down until it answers again.
	Timeout time.Duration `mapstructure:"timeout" help:"deadline of each Redis call (a request waits at most this long for the store)"`
	// DialTimeout bounds connecting to Redis (default 100ms).
	DialTimeout time.Duration `mapstructure:"dial_timeout" help:"deadline for connecting to Redis"`
	// PoolSize is the number of connections to Redis (default 16).
	PoolSize int `mapstructure:"pool_size" help:"connections to Redis"`
}

// Defaults returns the default configuration (local state).
func Defaults() Config {
	return Config{State: StateLocal, LoadInterval: 250 * time.Millisecond, LoadTTL: time.Second,
		Redis: RedisConfig{Address: "127.0.0.1:6379", KeyPrefix: "duet:", Timeout: 25 * time.Millisecond,
			DialTimeout: 100 * time.Millisecond, PoolSize: 16}}
}

// Validate checks the configuration; errors name the key.
func (c Config) Validate() error {
	switch {
	case c.State != StateLocal && c.State != StateRedis:
		return fmt.Errorf("state: must be %s or %s, got %q", StateLocal, StateRedis, c.State)
	case c.LoadInterval <= 0:
		return fmt.Errorf("load_interval: must be > 0, got %s", c.LoadInterval)
	case c.LoadTTL < 2*c.LoadInterval:
		return fmt.Errorf("load_ttl: must be >= 2 * load_interval (%s), got %s", 2*c.LoadInterval, c.LoadTTL)
	}
	if err := c.Redis.validate(); err != nil {
		return fmt.Errorf("redis.%w", err)
	}
	return nil
}

func (c RedisConfig) validate() error {
	if _, _, err := net.SplitHostPort(c.Address); err != nil {
		return fmt.Errorf("address: must be host:port, got %q", c.Address)
	}
	switch {
	case c.DB < 0:
		return fmt.Errorf("db: must be >= 0, got %d", c.DB)
	case c.KeyPrefix == "":
		return fmt.Errorf("key_prefix: must not be empty")
	case c.Timeout <= 0:
		return fmt.Errorf("timeout: must be > 0, got %s", c.Timeout)
	case c.DialTimeout <= 0:
		return fmt.Errorf("dial_timeout: must be > 0, got %s", c.DialTimeout)
	case c.PoolSize < 1:
		return fmt.Errorf("pool_size: must be >= 1, got %d", c.PoolSize)
	}
	return nil
}
