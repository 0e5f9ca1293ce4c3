package main

import (
	"context"
	"net"
	"strconv"

	"github.com/duet-serve/duet/tokenizer"
	"github.com/duet-serve/duet/workers/sim"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

func newSimCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "run one simulated GPU engine worker (TensorRT-LLM, vLLM or SGLang wire protocol)",
		Long: `Runs a simulated engine worker: an OpenAI-compatible server with a paged KV-cache
model, prefill and decode timing, and the engines' disaggregation protocols.
Every sim.* config key is also a flag; --time-scale shrinks all modelled times.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runWith(cmd, nil, runSim) },
	}
	bindSectionFlags(cmd.Flags(), a.v, "sim", sim.Defaults(), "")
	bindSectionFlags(cmd.Flags(), a.v, "tokenizer", tokenizer.Defaults(), "tokenizer-")
	return cmd
}

func runSim(ctx context.Context, cfg Config, log *zap.Logger) error {
	tok, err := tokenizer.New(cfg.Tokenizer)
	if err != nil {
		return err
	}
	srv, err := sim.New(cfg.Sim, tok, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Sim.Host, strconv.Itoa(cfg.Sim.Port)))
	if err != nil {
		return err
	}
	log.Info("sim worker listening", zap.String("addr", ln.Addr().String()),
		zap.String("role", cfg.Sim.Role), zap.String("protocol", cfg.Sim.Protocol), zap.String("model", cfg.Sim.Model),
		zap.String("tokenizer", tok.Info().Tokenizer), zap.String("chat_template", tok.Info().ChatTemplate))
	return srv.Serve(ctx, ln)
}
