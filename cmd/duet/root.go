package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
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
	root.AddCommand(newVersionCmd(), newServeCmd(a), newLaunchCmd(a), newSimCmd(a))
	return root
}
