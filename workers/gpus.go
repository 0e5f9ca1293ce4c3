package workers

import (
	"fmt"
	"strconv"
	"strings"
)

// visibleGPUs returns the GPU list to hand out and where it came from: the
// config's gpus, else the parent's CUDA_VISIBLE_DEVICES (possibly empty),
// else nil and "" meaning "0..N-1 by demand".
func visibleGPUs(c Config, lookupEnv func(string) (string, bool)) ([]string, string) {
	if len(c.GPUs) > 0 {
		return c.GPUs, "gpus"
	}
	if v, ok := lookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		var ids []string
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
		return ids, "CUDA_VISIBLE_DEVICES=" + v
	}
	return nil, ""
}

// gpuDemand is the number of GPUs the launched workers need in total.
func gpuDemand(pools []pool) int {
	n := 0
	for _, p := range pools {
		if p.cfg.launched() {
			n += p.cfg.Count * p.cfg.gpusPerWorker()
		}
	}
	return n
}

// assignGPUs hands the GPUs in avail out to the launched workers in order,
// context workers first, and returns the GPUs of worker i of pool pi at
// [pi][i]. source names avail in errors; "" means avail is empty because no
// list was given, and GPUs 0..N-1 are used for a demand of N. Without
// sharing, a demand above len(avail) is an error; with sharing, GPUs are
// reused round-robin.
func assignGPUs(avail []string, source string, sharing bool, pools []pool) ([][][]string, error) {
	demand := gpuDemand(pools)
	if source == "" {
		avail = make([]string, demand)
		for i := range avail {
			avail[i] = strconv.Itoa(i)
		}
		source = "by demand"
	}
	seen := map[string]bool{}
	for _, g := range avail {
		if seen[g] {
			return nil, fmt.Errorf("gpus: GPU %q listed twice (%s)", g, source)
		}
		seen[g] = true
	}
	for _, p := range pools {
		if per := p.cfg.gpusPerWorker(); p.cfg.launched() && p.cfg.Count > 0 && per > len(avail) {
			return nil, fmt.Errorf("%s.gpus_per_worker: %d GPUs per worker but only %d available (%s)", p.key, per, len(avail), source)
		}
	}
	if demand > len(avail) && !sharing {
		return nil, fmt.Errorf("gpus: the workers need %d GPUs (%s) but %d are available (%s); set allow_gpu_sharing: true to share GPUs", demand, demandText(pools), len(avail), source)
	}
	out := make([][][]string, len(pools))
	next := 0
	for pi, p := range pools {
		if !p.cfg.launched() {
			continue
		}
		per := p.cfg.gpusPerWorker()
		out[pi] = make([][]string, p.cfg.Count)
		for i := range out[pi] {
			ids := make([]string, per)
			for j := range ids {
				ids[j] = avail[(next+j)%len(avail)]
			}
			out[pi][i] = ids
			next += per
		}
	}
	return out, nil
}

// demandText spells out a demand: "context 2 x 1, generation 2 x 1".
func demandText(pools []pool) string {
	var parts []string
	for _, p := range pools {
		if p.cfg.launched() && p.cfg.Count > 0 {
			parts = append(parts, fmt.Sprintf("%s %d x %d", p.key, p.cfg.Count, p.cfg.gpusPerWorker()))
		}
	}
	return strings.Join(parts, ", ")
}
