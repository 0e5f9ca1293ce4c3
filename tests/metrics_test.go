package tests

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// metricsClient opens a connection per read: a pooled one that duet
// closed while idle (server.idle_timeout) could fail the read under load.
var metricsClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

// scrape calls sample for every sample of a Prometheus text exposition,
// with the metric's name and its labels as written between the braces.
func scrape(url string, sample func(name, labels string, v float64)) error {
	resp, err := metricsClient.Get(url)
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
