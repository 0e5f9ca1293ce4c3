package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"
)

// app is the state shared by every subcommand of one invocation: the viper
// instance every flag is bound to, and the --config path.
type app struct {
	v          *viper.Viper
	configFile string
}

func newRootCmd() *cobra.Command {
	a := &app{v: viper.New()}
	root := &cobra.Command{
		Use:           "duet",
		Short:         "duet: a disaggregated prefill/decode serving orchestrator for OpenAI clients",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.configFile, "config", "", "YAML config file (default: the embedded quickstart for serve, built-in defaults otherwise)")
	bindSectionFlags(pf, a.v, "log", defaultLogConfig(), "log-")
	root.AddCommand(newVersionCmd(), newServeCmd(a), newLaunchCmd(a), newSimCmd(a), newBenchCmd(a), newReplayCmd(a))
	groupFlagsInHelp(root)
	return root
}

// translatedConfig recognises a --config file that is TensorRT-LLM's
// disaggregated server config: it is translated into duet's YAML, which
// replaces *yamlDoc, and the path to load becomes "". It returns the path
// to load and the translation's notes.
func (a *app) translatedConfig(yamlDoc *[]byte) (string, []string, error) {
	if a.configFile == "" {
		return "", nil, nil
	}
	data, err := os.ReadFile(a.configFile)
	if err != nil || !isTRTLLMConfig(data) {
		return a.configFile, nil, nil // loadConfig reports a file it cannot read
	}
	translated, notes, err := translateTRTLLMConfig(data)
	if err != nil {
		return "", nil, fmt.Errorf("config: %s: %w", a.configFile, err)
	}
	*yamlDoc = translated
	return "", notes, nil
}

// runWith loads the configuration (defaultYAML stands in for --config when
// it is not given; nil means built-in defaults only), builds the logger and
// runs fn with a context that ends on SIGINT or SIGTERM.
func (a *app) runWith(cmd *cobra.Command, defaultYAML []byte, fn func(ctx context.Context, cfg Config, log *zap.Logger) error) error {
	path, notes, err := a.translatedConfig(&defaultYAML)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(a.v, path, defaultYAML)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.Log)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	for _, n := range notes {
		log.Warn("TensorRT-LLM config: " + n)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return fn(ctx, cfg, log)
}
