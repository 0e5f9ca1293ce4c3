package main

import (
	"testing"
	"time"

	"github.com/duet-serve/duet/tests/loadgen"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

func parseBench(t *testing.T, args ...string) (loadgen.Config, error) {
	t.Helper()
	f := &benchFlags{cfg: loadgen.Defaults()}
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	defineBenchFlags(fs, f)
	require.NoError(t, fs.Parse(args))
	return f.config(fs)
}

func TestBenchFlagsTakeAiperfSpellings(t *testing.T) {
	cfg, err := parseBench(t, "--model-names", "m", "-u", "host:9", "--conversation-num", "7",
		"--conversation-turn-mean", "4", "--conversation-turn-delay-mean", "250", "--synthetic-input-tokens-mean", "64",
		"--output-tokens-mean", "32", "--arrival-pattern", "constant", "--request-rate", "3",
		"-H", "X-A:1", "--header", `{"X-B":"2"}`, "--extra-inputs", "ignore_eos:true", "--extra-inputs", "min_tokens:5",
		"--benchmark-duration", "1.5", "--request-timeout-seconds", "9", "--random-seed", "0")
	require.NoError(t, err)
	require.Equal(t, "m", cfg.Model)
	require.Equal(t, []string{"host:9"}, cfg.URLs)
	require.Equal(t, 7, cfg.NumSessions)
	require.Equal(t, 4.0, cfg.TurnsMean)
	require.Equal(t, 250.0, cfg.TurnDelayMean)
	require.Equal(t, 64, cfg.ISL)
	require.Equal(t, 32, cfg.OSL)
	require.Equal(t, loadgen.ArrivalConstant, cfg.ArrivalPattern)
	require.Equal(t, []loadgen.Header{{Name: "X-A", Value: "1"}, {Name: "X-B", Value: "2"}}, cfg.Headers)
	require.Equal(t, []loadgen.ExtraInput{{Key: "ignore_eos", Value: []byte("true")}, {Key: "min_tokens", Value: []byte("5")}}, cfg.ExtraInputs)
	require.Equal(t, 1500*time.Millisecond, cfg.Duration)
	require.Equal(t, 9*time.Second, cfg.RequestTimeout)
	require.True(t, cfg.SeedSet, "--random-seed 0 is a seed")
	require.Equal(t, uint64(0), cfg.Seed)

	cfg, err = parseBench(t, "-m", "m")
	require.NoError(t, err)
	require.False(t, cfg.SeedSet, "no seed: Run draws one")
	require.Equal(t, 30*time.Second, cfg.GracePeriod)
}

func TestBenchPrefixPromptFlags(t *testing.T) {
	for _, c := range []struct {
		name         string
		args         []string
		pool, length int
		stddev, zipf float64
	}{
		{"aiperf's names", []string{"--prefix-prompt-pool-size", "150", "--prefix-prompt-length", "25000"}, 150, 25000, 0, 0},
		{"aiperf's other spellings", []string{"--num-prefix-prompts", "3", "--prompt-prefix-length", "10"}, 3, 10, 0, 0},
		{"aiperf 0.5's pool spelling", []string{"--prompt-prefix-pool-size", "2", "--prefix-prompt-length", "10"}, 2, 10, 0, 0},
		{"duet's spread and popularity", []string{"--prefix-prompt-pool-size", "150", "--prefix-prompt-length", "25000",
			"--prefix-prompt-length-stddev", "8000", "--prefix-prompt-zipf", "1.1"}, 150, 25000, 8000, 1.1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseBench(t, append([]string{"-m", "m"}, c.args...)...)
			require.NoError(t, err)
			require.Equal(t, c.pool, cfg.PrefixPromptPoolSize)
			require.Equal(t, c.length, cfg.PrefixPromptLength)
			require.Equal(t, c.stddev, cfg.PrefixPromptLengthStddev)
			require.Equal(t, c.zipf, cfg.PrefixPromptZipf)
		})
	}
	_, err := parseBench(t, "-m", "m", "--prefix-prompt-length", "100")
	require.ErrorContains(t, err, "--prefix-prompt-pool-size: must be >= 1 with --prefix-prompt-length")
}

func TestBenchFlagErrorsNameTheFlag(t *testing.T) {
	_, err := parseBench(t, "-m", "m", "--extra-inputs", "oops")
	require.ErrorContains(t, err, "--extra-inputs")
	_, err = parseBench(t, "--isl", "10")
	require.ErrorContains(t, err, "--model: required")
	_, err = parseBench(t, "-m", "m", "--user-centric-rate", "2")
	require.ErrorContains(t, err, "--num-users")
}

func TestDefaultArtifactDir(t *testing.T) {
	c := loadgen.Defaults()
	c.Model, c.Concurrency = "meta-llama/Llama-3.1-8B-Instruct", 8
	require.Equal(t, "artifacts/meta-llama_Llama-3.1-8B-Instruct-openai-chat-concurrency8", defaultArtifactDir(c))
	c.RequestRate = 2.5
	require.Equal(t, "artifacts/meta-llama_Llama-3.1-8B-Instruct-openai-chat-request_rate2.5", defaultArtifactDir(c))
}

func TestBenchTakesSeveralURLs(t *testing.T) {
	cfg, err := parseBench(t, "-m", "m", "--url", "a:1,b:2", "-u", "c:3", "--url-strategy", "turn_round_robin")
	require.NoError(t, err)
	require.Equal(t, []string{"a:1", "b:2", "c:3"}, cfg.URLs)
	require.Equal(t, loadgen.URLTurnRoundRobin, cfg.URLStrategy)

	cfg, err = parseBench(t, "-m", "m")
	require.NoError(t, err)
	require.Equal(t, []string{"http://localhost:8000"}, cfg.URLs, "the default")
	require.Equal(t, loadgen.URLRoundRobin, cfg.URLStrategy)

	_, err = parseBench(t, "-m", "m", "--url-strategy", "random")
	require.ErrorContains(t, err, "--url-strategy")
}
