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
			applyDiscovered(ps, "file", ws, log)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("config: fleet.workers_file: %s: %w", path, err)
	}
	go func() {
		defer close(done)
		discovery.WatchFile(ctx, path, cfg.WorkersFileInterval, discoveredOrLogged(ps, "file", "workers file not applied", log))
	}()
	return done, nil
}

// startEtcd watches the workers registered in etcd (fleet.etcd_uri) until
// ctx ends; the returned channel closes when the watcher has stopped. etcd
// that cannot be reached is logged once per change and changes nothing.
func startEtcd(ctx context.Context, cfg workers.Config, ps *poolSync, log *zap.Logger) <-chan struct{} {
	done := make(chan struct{})
	if cfg.EtcdURI == "" {
		close(done)
		return done
	}
	endpoints, _ := discovery.ParseEtcdURI(cfg.EtcdURI) // validated with the config
	e := discovery.Etcd{Endpoints: endpoints, Cluster: cfg.EtcdClusterName}
	log = log.Named("discovery").With(zap.String("etcd", cfg.EtcdURI), zap.String("prefix", e.Prefix()))
	go func() {
		defer close(done)
		discovery.WatchEtcd(ctx, e, cfg.EtcdInterval, discoveredOrLogged(ps, "etcd", "etcd unreachable", log))
	}()
	return done
}

// discoveredOrLogged is a watcher's callback: a list is applied; an error
// is logged (as failure) and changes nothing.
func discoveredOrLogged(ps *poolSync, source, failure string, log *zap.Logger) func([]discovery.Worker, error) {
	return func(ws []discovery.Worker, err error) {
		if err != nil {
			log.Error(failure+": the workers stay as they were", zap.Error(err))
			return
		}
		applyDiscovered(ps, source, ws, log)
	}
}

// applyDiscovered makes the fleet's workers from source ws and brings the
// router's pool up to date.
func applyDiscovered(ps *poolSync, source string, ws []discovery.Worker, log *zap.Logger) {
	desired := make([]workers.ExternalWorker, len(ws))
	for i, w := range ws {
		desired[i] = workers.ExternalWorker{Name: w.ID, URL: w.URL, Role: w.Role, BootstrapPort: w.BootstrapPort}
	}
	added, removed, err := ps.fleet.Reconcile(source, desired)
	if len(added)+len(removed) > 0 {
		log.Info("discovered workers applied", zap.Strings("added", added), zap.Strings("removed", removed))
	}
	if err != nil {
		log.Error("some discovered workers were not added", zap.Error(err))
	}
	ps.sync()
}
