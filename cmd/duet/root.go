package main

import (
	"context"
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
	return root
}

// runWith loads the configuration (defaultYAML stands in for --config when
// it is not given; nil means built-in defaults only), builds the logger and
// runs fn with a context that ends on SIGINT or SIGTERM.
func (a *app) runWith(cmd *cobra.Command, defaultYAML []byte, fn func(ctx context.Context, cfg Config, log *zap.Logger) error) error {
	cfg, err := loadConfig(a.v, a.configFile, defaultYAML)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.Log)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return fn(ctx, cfg, log)
}
