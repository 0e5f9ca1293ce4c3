//go:build soak

package tests

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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

// scrape calls sample for every sample of a Prometheus text exposition,
// with the metric's name and its labels as written between the braces.
func scrape(url string, sample func(name, labels string, v float64)) error {
	resp, err := soakHTTP.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		series, value, _ := strings.Cut(line, " ")
		if i := strings.LastIndexByte(line, '}'); i > 0 { // label values may hold spaces
			series, value = line[:i+1], strings.TrimSpace(line[i+1:])
		}
		name, labels, _ := strings.Cut(series, "{")
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return fmt.Errorf("%s: %q: %w", url, line, err)
		}
		sample(name, strings.TrimSuffix(labels, "}"), v)
	}
	return sc.Err()
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
