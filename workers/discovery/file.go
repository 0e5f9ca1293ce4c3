// Package discovery reads the worker sets that membership sources publish:
// a watched file (YAML or JSON, so that any scheduler — Slurm, a Kubernetes
// ConfigMap, a script — can drive membership). The fleet reconciles its
// workers with each set (workers.Fleet.Reconcile).
package discovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/duet-serve/duet/proto/disagg"
	"go.yaml.in/yaml/v3"
)

// Worker is one worker a source lists.
type Worker struct {
	// ID names the worker in duet (X-Duet-*-Worker, /cluster_info).
	ID string `yaml:"id"`
	// URL is its base URL (http:// or https://).
	URL string `yaml:"url"`
	// Role is context, generation or mixed.
	Role disagg.Role `yaml:"role"`
	// BootstrapPort is an SGLang prefill worker's bootstrap port (0: none).
	BootstrapPort int `yaml:"bootstrap_port"`
}

// fileDoc is the file's shape.
type fileDoc struct {
	Workers []Worker `yaml:"workers"`
}

// maxFileBytes bounds a workers file: a list of even 10,000 workers fits.
const maxFileBytes = 4 << 20

// ParseFile reads a workers file: `workers:` followed by a list of {id, url,
// role[, bootstrap_port]}. Unknown keys, duplicate ids or URLs and invalid
// values are errors that name the entry and the key.
func ParseFile(data []byte) ([]Worker, error) {
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("the file is %d bytes, above the limit of %d", len(data), maxFileBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var doc fileDoc
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) { // an empty file lists no worker
		return nil, err
	}
	ids, urls := map[string]int{}, map[string]int{}
	for i := range doc.Workers {
		w := &doc.Workers[i]
		w.URL = strings.TrimRight(w.URL, "/")
		if err := w.Validate(); err != nil {
			return nil, fmt.Errorf("workers[%d].%w", i, err)
		}
		if j, dup := ids[w.ID]; dup {
			return nil, fmt.Errorf("workers[%d].id: %q is also workers[%d]'s", i, w.ID, j)
		}
		if j, dup := urls[w.URL]; dup {
			return nil, fmt.Errorf("workers[%d].url: %q is also workers[%d]'s", i, w.URL, j)
		}
		ids[w.ID], urls[w.URL] = i, i
	}
	return doc.Workers, nil
}

// Validate checks a worker as every membership source (this file, etcd,
// the admin API) must: an id without '/' or whitespace, an http(s) URL with
// a host, a known role, and a bootstrap port only on a worker that serves
// context. Errors name the key.
func (w *Worker) Validate() error {
	if w.ID == "" || strings.ContainsAny(w.ID, "/ \t\r\n") {
		return fmt.Errorf("id: must be non-empty, without '/' or whitespace, got %q", w.ID)
	}
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("url: must be http:// or https:// with a host, got %q", w.URL)
	}
	switch w.Role {
	case disagg.RoleContext, disagg.RoleGeneration, disagg.RoleMixed:
	default:
		return fmt.Errorf("role: must be context, generation or mixed, got %q", w.Role)
	}
	if w.BootstrapPort < 0 || w.BootstrapPort > 65535 || (w.BootstrapPort > 0 && !w.Role.ServesContext()) {
		return fmt.Errorf("bootstrap_port: must be a port of a worker that serves context, got %d", w.BootstrapPort)
	}
	return nil
}

// WatchFile reads path every interval and, when its content has changed
// and then stayed the same for one more read (a file caught mid-write —
// truncated or half written — is never applied), calls apply with the
// workers, or with the error of a file that cannot be read or parsed (the
// caller keeps the previous set). A Kubernetes ConfigMap's symlink swap
// counts as a change. The first call comes after the second read; the
// caller reads the file itself at start. It returns when ctx ends.
func WatchFile(ctx context.Context, path string, interval time.Duration, apply func([]Worker, error)) {
	poll(ctx, interval, settled(func() (string, func()) {
		data, err := os.ReadFile(path)
		if err != nil {
			return "error: " + err.Error(), func() { apply(nil, err) }
		}
		return strconv.FormatUint(xxhash.Sum64(data), 16), func() { apply(ParseFile(data)) }
	}))
}

// settled wraps read so that it reports a state only when the read before
// saw the same one, and nothing (a nil delivery) otherwise.
func settled(read func() (string, func())) func() (string, func()) {
	var prev string
	seen := false
	return func() (string, func()) {
		state, deliver := read()
		if !seen || state != prev {
			prev, seen = state, true
			return "", nil
		}
		return state, deliver
	}
}

// poll calls read now and every interval until ctx ends, and runs the
// delivery read returns when its state differs from the last one delivered
// (and on the first delivery). A nil delivery reports nothing.
func poll(ctx context.Context, interval time.Duration, read func() (state string, deliver func())) {
	var last string
	first := true
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		state, deliver := read()
		if deliver != nil && ctx.Err() == nil && (first || state != last) {
			first, last = false, state
			deliver()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
