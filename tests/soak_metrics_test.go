//go:build soak

package tests

import (
	"net/http"
	"sync"
	"time"
)

// duetProbe is what the soak reads from duet's /metrics.
type duetProbe struct {
	leases     float64 // duet_worker_inflight, summed
	load       float64 // duet_worker_load_tokens, summed
	slots      float64 // duet_queue_inflight, summed
	queued     float64 // duet_queue_depth, summed
	goroutines float64
	rss        float64
	started    float64 // process_start_time_seconds
}

// soakHTTP reads metrics and admin endpoints.
var soakHTTP = &http.Client{Timeout: 10 * time.Second}

func probeDuet(url string) (duetProbe, error) {
	var p duetProbe
	err := scrape(url+"/metrics", func(name, _ string, v float64) {
		switch name {
		case "duet_worker_inflight":
			p.leases += v
		case "duet_worker_load_tokens":
			p.load += v
		case "duet_queue_inflight":
			p.slots += v
		case "duet_queue_depth":
			p.queued += v
		case "go_goroutines":
			p.goroutines = v
		case "process_resident_memory_bytes":
			p.rss = v
		case "process_start_time_seconds":
			p.started = v
		}
	})
	return p, err
}

// workerSeqs sums the sequences every worker still runs or queues.
func (d *soakDuet) workerSeqs() (float64, error) {
	c, err := d.clusterInfo()
	if err != nil {
		return 0, err
	}
	var n float64
	for _, w := range c.Fleet {
		err := scrape(w.URL+"/metrics", func(name, _ string, v float64) {
			if name == "vllm:num_requests_running" || name == "vllm:num_requests_waiting" {
				n += v
			}
		})
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// rssSampler records duet's peak resident memory, polling /metrics.
type rssSampler struct {
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
	mu   sync.Mutex // guards max
	max  float64
}

func startRSSSampler(url string, base float64) *rssSampler {
	s := &rssSampler{done: make(chan struct{}), max: base}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-tick.C:
				if p, err := probeDuet(url); err == nil {
					s.mu.Lock()
					s.max = max(s.max, p.rss)
					s.mu.Unlock()
				}
			}
		}
	}()
	return s
}

func (s *rssSampler) stop() {
	s.once.Do(func() { close(s.done) })
	s.wg.Wait()
}

func (s *rssSampler) peak() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max
}
