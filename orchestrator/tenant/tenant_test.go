package tenant

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func headers(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(name string) string { return m[name] }
}

func testTenants() Config {
	c := Defaults()
	c.Tenants = []Spec{{Name: "acme", APIKeys: []string{"sk-acme-1", "sk-acme-2"}, Class: "high"},
		{Name: "beta", APIKeys: []string{"sk-beta-1"}}}
	return c
}

func TestIdentifyByAPIKey(t *testing.T) {
	s := NewSet(testTenants())
	for _, auth := range []string{"Bearer sk-acme-1", "bearer sk-acme-2", "  Bearer   sk-acme-1 "} {
		got, err := s.Identify(headers("Authorization", auth))
		require.NoError(t, err)
		require.Equal(t, "acme", got.Name, auth)
		require.Equal(t, "high", got.Class)
	}
	for _, auth := range []string{"", "Bearer", "Basic sk-acme-1", "Bearer sk-acme", "sk-acme-1"} {
		got, err := s.Identify(headers("Authorization", auth))
		require.NoError(t, err, "not required: served without a tenant")
		require.Nil(t, got, auth)
	}
}

func TestRequireKey(t *testing.T) {
	cfg := testTenants()
	cfg.RequireKey = true
	s := NewSet(cfg)
	_, err := s.Identify(headers("Authorization", "Bearer sk-unknown"))
	require.ErrorIs(t, err, ErrUnknown)
	_, err = s.Identify(headers())
	require.ErrorIs(t, err, ErrUnknown)
	got, err := s.Identify(headers("Authorization", "Bearer sk-beta-1"))
	require.NoError(t, err)
	require.Equal(t, "beta", got.Name)
}

func TestIdentifyByGatewayHeader(t *testing.T) {
	cfg := testTenants()
	cfg.Header, cfg.RequireKey = "X-Tenant", true
	s := NewSet(cfg)
	got, err := s.Identify(headers("X-Tenant", "beta", "Authorization", "Bearer sk-acme-1"))
	require.NoError(t, err)
	require.Equal(t, "beta", got.Name, "the gateway's header wins; keys are not read")
	_, err = s.Identify(headers("X-Tenant", "gamma"))
	require.ErrorIs(t, err, ErrUnknown)
}

func TestNoTenants(t *testing.T) {
	var s *Set
	require.False(t, s.Enabled())
	got, err := NewSet(Defaults()).Identify(headers("Authorization", "Bearer sk-acme-1"))
	require.NoError(t, err)
	require.Nil(t, got)
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, testTenants().Validate())
	cases := []struct {
		name string
		edit func(*Config)
		err  string
	}{
		{"header", func(c *Config) { c.Header = "X Tenant" }, `header: "X Tenant" is not a header name`},
		{"burst", func(c *Config) { c.Burst = time.Millisecond }, "burst: must be >= 1s, got 1ms"},
		{"name", func(c *Config) { c.Tenants[0].Name = "a/b" }, `list[0].name: "a/b" is not a tenant name (letters, digits, '.', '_' and '-', at most 64)`},
		{"twice", func(c *Config) { c.Tenants[1].Name = "acme" }, `list[1].name: "acme" is listed twice`},
		{"input", func(c *Config) { c.Tenants[0].InputTokensPerMinute = -1 }, "list[0].input_tokens_per_minute: must be in [0, 1099511627776], got -1"},
		{"output", func(c *Config) { c.Tenants[0].OutputTokensPerMinute = -1 }, "list[0].output_tokens_per_minute: must be in [0, 1099511627776], got -1"},
		{"concurrency", func(c *Config) { c.Tenants[1].MaxConcurrency = -2 }, "list[1].max_concurrency: must be >= 0, got -2"},
		{"shared key", func(c *Config) { c.Tenants[1].APIKeys = []string{"sk-acme-2"} }, `list[1].api_keys: a key of "beta" is also a key of "acme"`},
		{"require without tenants", func(c *Config) { c.Tenants, c.RequireKey = nil, true },
			"require_key: no tenant is listed in list, every request would be refused"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testTenants()
			c.edit(&cfg)
			require.EqualError(t, cfg.Validate(), c.err)
		})
	}
}
