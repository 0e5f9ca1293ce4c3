package loadgen

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPrefixPoolValidation(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string // "" when valid
	}{
		{"pool of documents", func(c *Config) { c.PrefixPromptPoolSize, c.PrefixPromptLength = 3, 100 }, ""},
		{"spread and popularity", func(c *Config) {
			c.PrefixPromptPoolSize, c.PrefixPromptLength, c.PrefixPromptLengthStddev, c.PrefixPromptZipf = 3, 100, 30, 1.1
		}, ""},
		{"length without a pool", func(c *Config) { c.PrefixPromptLength = 100 }, "--prefix-prompt-pool-size: must be >= 1 with --prefix-prompt-length"},
		{"pool without a length", func(c *Config) { c.PrefixPromptPoolSize = 3 }, "--prefix-prompt-length: must be >= 1 with --prefix-prompt-pool-size"},
		{"negative pool", func(c *Config) { c.PrefixPromptPoolSize, c.PrefixPromptLength = -1, 100 }, "--prefix-prompt-pool-size: must be >= 0"},
		{"negative length", func(c *Config) { c.PrefixPromptPoolSize, c.PrefixPromptLength = 3, -5 }, "--prefix-prompt-length: must be >= 0"},
		{"negative stddev", func(c *Config) {
			c.PrefixPromptPoolSize, c.PrefixPromptLength, c.PrefixPromptLengthStddev = 3, 100, -1
		}, "--prefix-prompt-length-stddev: must be >= 0"},
		{"negative zipf", func(c *Config) {
			c.PrefixPromptPoolSize, c.PrefixPromptLength, c.PrefixPromptZipf = 3, 100, -0.5
		}, "--prefix-prompt-zipf: must be >= 0"},
		{"stddev without a pool", func(c *Config) { c.PrefixPromptLengthStddev = 10 }, "--prefix-prompt-length-stddev: only with"},
		{"zipf without a pool", func(c *Config) { c.PrefixPromptZipf = 1 }, "--prefix-prompt-zipf: only with"},
		{"with an input file", func(c *Config) {
			c.PrefixPromptPoolSize, c.PrefixPromptLength, c.InputFile, c.DatasetType = 3, 100, "x.jsonl", DatasetMultiTurn
		}, "--prefix-prompt-pool-size: only for synthetic sessions"},
		{"with a shared system prompt", func(c *Config) {
			c.PrefixPromptPoolSize, c.PrefixPromptLength, c.SharedSystemPromptLength = 3, 100, 50
		}, "--prefix-prompt-pool-size: mutually exclusive with --shared-system-prompt-length"},
		{"with a user context prompt", func(c *Config) {
			c.PrefixPromptPoolSize, c.PrefixPromptLength, c.UserContextPromptLength = 3, 100, 50
		}, "--prefix-prompt-pool-size: mutually exclusive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			c.edit(&cfg)
			err := cfg.Validate()
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.want)
		})
	}
}

func TestPrefixPoolSessions(t *testing.T) {
	tok, corpus := testDeps(t)
	for _, c := range []struct {
		name           string
		pool, length   int
		stddev, zipf   float64
		turns          float64
		wantMinLengths int // distinct prefix lengths in tokens, at least
	}{
		{"fixed length, uniform", 4, 200, 0, 0, 1, 1},
		{"spread lengths", 4, 200, 80, 0, 1, 3},
		{"zipf popularity, multi-turn", 6, 100, 0, 1.2, 3, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.NumSessions, cfg.TurnsMean = 300, c.turns
			cfg.PrefixPromptPoolSize, cfg.PrefixPromptLength = c.pool, c.length
			cfg.PrefixPromptLengthStddev, cfg.PrefixPromptZipf = c.stddev, c.zipf
			require.NoError(t, cfg.Validate())
			pool := newPrefixPool(cfg, corpus, cfg.Seed)
			require.Len(t, pool.prompts, c.pool)
			lengths := map[int]bool{}
			for _, p := range pool.prompts {
				n := len(tok.Encode(p))
				require.InDelta(t, c.length, n, 4*c.stddev+2, "a prefix's length in tokens")
				lengths[n] = true
			}
			require.GreaterOrEqual(t, len(lengths), c.wantMinLengths)

			sessions := newSynthetic(cfg, corpus, cfg.Seed, 1, cfg.NumSessions).all()
			again := newSynthetic(cfg, corpus, cfg.Seed, 1, cfg.NumSessions).all()
			warm := newSynthetic(cfg, corpus, cfg.Seed, 2, 3).all()
			picks := make([]int, c.pool)
			for i, s := range sessions {
				require.Equal(t, again[i], s, "the same seed gives the same sessions")
				require.Empty(t, s.System)
				k := prefixOf(t, pool, s.Turns[0].Text)
				picks[k]++
				for _, later := range s.Turns[1:] {
					require.Equal(t, -1, prefixIndex(pool, later.Text), "only the first turn carries a prefix, as in aiperf")
				}
			}
			for _, s := range warm {
				prefixOf(t, pool, s.Turns[0].Text) // the warm-up draws from the same pool
			}
			for k, n := range picks {
				require.Positive(t, n, "prefix %d is never picked", k)
			}
			if c.zipf > 0 {
				require.Greater(t, picks[0], 2*picks[c.pool-1], "the first prefix is the most popular")
			}
		})
	}
}

// prefixIndex is the index of the pool prompt text starts with, followed
// by a space, or -1.
func prefixIndex(p *prefixPool, text string) int {
	for i, pre := range p.prompts {
		if strings.HasPrefix(text, pre+" ") {
			return i
		}
	}
	return -1
}

func prefixOf(t *testing.T, p *prefixPool, text string) int {
	t.Helper()
	k := prefixIndex(p, text)
	require.NotEqual(t, -1, k, "the first turn starts with a pool prompt and a space")
	return k
}

func TestPrefixPoolPickFollowsZipf(t *testing.T) {
	for _, c := range []struct {
		name string
		s    float64
	}{{"uniform", 0}, {"s=1", 1}, {"s=2", 2}} {
		t.Run(c.name, func(t *testing.T) {
			const n, draws = 5, 200000
			p := &prefixPool{prompts: make([]string, n)}
			if c.s > 0 {
				cfg := Config{PrefixPromptPoolSize: n, PrefixPromptLength: 1, PrefixPromptZipf: c.s}
				_, corpus := testDeps(t)
				p = newPrefixPool(cfg, corpus, 1)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			counts := make([]float64, n)
			for range draws {
				counts[p.pick(rng)]++
			}
			norm := 0.0
			for i := range n {
				norm += math.Pow(float64(i+1), -c.s)
			}
			for i := range n {
				want := math.Pow(float64(i+1), -c.s) / norm
				require.InDelta(t, want, counts[i]/draws, 0.01, "share of prefix %d", i)
			}
		})
	}
}
