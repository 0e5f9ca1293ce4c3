package main

import (
	"context"
	"fmt"
	"os"

	"github.com/duet-serve/duet/workers"
	"github.com/duet-serve/duet/workers/discovery"
	"go.uber.org/zap"
)

// startWorkersFile applies fleet.workers_file now (a file that cannot be
// read or parsed fails the start, naming the key) and then watches it until
// ctx ends; the returned channel closes when the watcher has stopped. A
// later change that cannot be read or parsed is logged and changes nothing.
func startWorkersFile(ctx context.Context, cfg workers.Config, ps *poolSync, log *zap.Logger) (<-chan struct{}, error) {
	done := make(chan struct{})
	path := cfg.WorkersFile
	if path == "" {
		close(done)
		return done, nil
	}
	log = log.Named("discovery").With(zap.String("file", path))
	data, err := os.ReadFile(path)
	if err == nil {
		var ws []discovery.Worker
		if ws, err = discovery.ParseFile(data); err == nil {
			applyDiscovered(ps, ws, log)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("config: fleet.workers_file: %s: %w", path, err)
	}
	go func() {
		defer close(done)
		discovery.WatchFile(ctx, path, cfg.WorkersFileInterval, func(ws []discovery.Worker, err error) {
			if err != nil {
				log.Error("workers file not applied: the workers stay as they were", zap.Error(err))
				return
			}
			applyDiscovered(ps, ws, log)
		})
	}()
	return done, nil
}

// applyDiscovered makes the fleet's discovered workers ws and brings the
// router's pool up to date.
func applyDiscovered(ps *poolSync, ws []discovery.Worker, log *zap.Logger) {
	desired := make([]workers.ExternalWorker, len(ws))
	for i, w := range ws {
		desired[i] = workers.ExternalWorker{Name: w.ID, URL: w.URL, Role: w.Role, BootstrapPort: w.BootstrapPort}
	}
	added, removed, err := ps.fleet.Reconcile(desired)
	if len(added)+len(removed) > 0 {
		log.Info("workers file applied", zap.Strings("added", added), zap.Strings("removed", removed))
	}
	if err != nil {
		log.Error("workers file: some workers were not added", zap.Error(err))
	}
	ps.sync()
}
