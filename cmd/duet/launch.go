package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/duet-serve/duet/workers"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

// launchFlags are duet launch's own flags.
type launchFlags struct {
	dryRun       bool
	emitTRTLLM   string
	emitHostname string
	emitPort     int
}

func newLaunchCmd(a *app) *cobra.Command {
	var f launchFlags
	cmd := &cobra.Command{
		Use:   "launch",
		Short: "launch and supervise only the worker fleet (no frontend)",
		Long: `Launches the fleet: section of the config, waits until every worker is healthy,
prints a table of the workers and supervises them (restarts) until SIGINT or
SIGTERM, then stops them all. --dry-run prints the exact commands, environment
and generated files instead of starting anything.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runWith(cmd, nil, func(ctx context.Context, cfg Config, log *zap.Logger) error {
				return runLaunch(ctx, cmd.OutOrStdout(), cfg, f, log)
			})
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&f.dryRun, "dry-run", false, "print the commands and generated files; start nothing")
	fs.StringVar(&f.emitTRTLLM, "emit-trtllm-config", "", "write a TensorRT-LLM disagg_config.yaml for the launched fleet to this file")
	fs.StringVar(&f.emitHostname, "emit-hostname", "127.0.0.1", "hostname in the emitted disagg_config.yaml")
	fs.IntVar(&f.emitPort, "emit-port", 8000, "port in the emitted disagg_config.yaml")
	return cmd
}

func runLaunch(ctx context.Context, out io.Writer, cfg Config, f launchFlags, log *zap.Logger) error {
	models := cfg.resolved
	if len(models) == 0 {
		models = []Config{cfg}
	} else if f.emitTRTLLM != "" {
		return fmt.Errorf("--emit-trtllm-config describes one fleet: launch each model's fleet with a config of its own")
	}
	var fleets []*workers.Fleet
	defer func() {
		for _, fl := range fleets {
			stopFleet(fl, cfg.Fleet.ShutdownGrace, log)
		}
	}()
	for _, m := range models {
		if len(models) > 1 {
			fmt.Fprintf(out, "# model %s\n", m.Orchestrator.Models[0])
		}
		fleet, err := launchFleet(ctx, out, m, f, log)
		if err != nil {
			return err
		}
		if fleet != nil {
			fleets = append(fleets, fleet)
		}
	}
	if f.dryRun {
		return nil
	}
	<-ctx.Done()
	return nil
}

// launchFleet launches cfg's fleet and prints its workers, or with
// --dry-run prints what it would run (nil fleet).
func launchFleet(ctx context.Context, out io.Writer, cfg Config, f launchFlags, log *zap.Logger) (*workers.Fleet, error) {
	simArgs, err := simTokenizerArgs(cfg.Tokenizer)
	if err != nil {
		return nil, err
	}
	opts := workers.Options{SimProtocol: cfg.Orchestrator.Protocol, SimArgs: simArgs, Logger: log.Named("fleet")}
	if f.dryRun {
		plan, err := workers.NewPlan(cfg.Fleet, opts) // creates nothing
		if err != nil {
			return nil, err
		}
		if err := plan.WriteScript(out); err != nil {
			return nil, err
		}
		if f.emitTRTLLM == "" {
			return nil, nil
		}
		return nil, emitTRTLLMConfig(out, f, planned(plan), true)
	}
	fleet, err := workers.New(cfg.Fleet, opts)
	if err != nil {
		return nil, err
	}
	if err := fleet.Start(ctx); err != nil {
		stopFleet(fleet, cfg.Fleet.ShutdownGrace, log)
		return nil, err
	}
	if err := printWorkers(out, fleet.Snapshot()); err != nil {
		stopFleet(fleet, cfg.Fleet.ShutdownGrace, log)
		return nil, err
	}
	if f.emitTRTLLM != "" {
		if err := emitTRTLLMConfig(out, f, fleet.Snapshot(), false); err != nil {
			stopFleet(fleet, cfg.Fleet.ShutdownGrace, log)
			return nil, err
		}
	}
	return fleet, nil
}

// planned lists a plan's workers as the fleet would report them.
func planned(plan *workers.Plan) []workers.Worker {
	ws := make([]workers.Worker, len(plan.Workers))
	for i, s := range plan.Workers {
		ws[i] = workers.Worker{Name: s.Name, Role: s.Role, URL: s.URL}
	}
	return ws
}

// emitTRTLLMConfig writes TensorRT-LLM's disagg_config.yaml for ws to
// --emit-trtllm-config; with --dry-run it prints it instead, after the
// script, as a comment block a shell ignores.
func emitTRTLLMConfig(out io.Writer, f launchFlags, ws []workers.Worker, dryRun bool) error {
	b, err := workers.TRTLLMDisaggConfig(f.emitHostname, f.emitPort, ws)
	if err != nil {
		return fmt.Errorf("--emit-trtllm-config: %w", err)
	}
	if dryRun {
		fmt.Fprintf(out, "\n# --emit-trtllm-config %s (not written: --dry-run):\n", f.emitTRTLLM)
		for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			fmt.Fprintf(out, "#   %s\n", line)
		}
		return nil
	}
	if err := os.WriteFile(f.emitTRTLLM, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", f.emitTRTLLM, err)
	}
	fmt.Fprintf(out, "wrote %s\n", f.emitTRTLLM)
	return nil
}

// printWorkers writes the worker table: name, role, URL, GPUs, pid, state.
func printWorkers(out io.Writer, ws []workers.Worker) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tURL\tGPUS\tPID\tSTATE")
	for _, w := range ws {
		gpus := strings.Join(w.GPUs, ",")
		if gpus == "" {
			gpus = "-"
		}
		pid := "-"
		if w.PID != 0 {
			pid = fmt.Sprint(w.PID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", w.Name, w.Role, w.URL, gpus, pid, w.State)
	}
	return tw.Flush()
}
