package workers

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The test binary doubles as the processes the tests need, chosen by the
// DUET_FAKE environment variable:
//
//	worker: a fake engine worker (see fakeWorker)
//	sleep:  a grandchild that sleeps, to check process-group kills
//	parent: a duet stand-in that launches one fake worker and waits to be
//	        killed, to check Pdeathsig
func TestMain(m *testing.M) {
	switch os.Getenv("DUET_FAKE") {
	case "worker":
		os.Exit(fakeWorker(os.Args[1:]))
	case "sleep":
		time.Sleep(time.Hour)
		os.Exit(0)
	case "parent":
		os.Exit(fakeParent())
	}
	goleak.VerifyTestMain(m)
}

// fakeWorker serves GET /health on --host:--port and misbehaves as told.
func fakeWorker(args []string) int {
	fs := flag.NewFlagSet("fake-worker", flag.ContinueOnError)
	host := fs.String("host", "127.0.0.1", "listen host")
	port := fs.Int("port", 0, "listen port")
	name := fs.String("name", "fake", "worker name, printed in output lines")
	lines := fs.Int("lines", 0, "lines to print to stdout at start")
	message := fs.String("message", "", "line to print to stderr at start")
	failHealth := fs.Bool("fail-health", false, "answer 503 to every health check")
	unhealthyAfter := fs.Duration("unhealthy-after", 0, "answer 503 once running this long")
	exitAfter := fs.Duration("exit-after", -1, "exit with status 3 after this long (-1: never)")
	healthFile := fs.String("health-file", "", "healthy only while this file exists")
	ignoreTerm := fs.Bool("ignore-term", false, "ignore SIGTERM")
	childPIDFile := fs.String("child-pid-file", "", "start a sleeping child and write its pid here")
	cacheSize := fs.Int("cache-size", 0, "answer GET /cache-size with this number (0: 404)")
	modelsFile := fs.String("models-file", "", "answer GET /v1/models with this file, read at each request (empty: 404)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for i := 0; i < *lines; i++ {
		fmt.Printf("%s line %d\n", *name, i)
	}
	if *message != "" {
		fmt.Fprintln(os.Stderr, *message)
	}
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	if *exitAfter == 0 { // at once, before serving a health check (a goroutine may lose that race on a loaded machine)
		fmt.Println("exiting on purpose")
		return 3
	}
	if *exitAfter > 0 {
		go func() {
			time.Sleep(*exitAfter)
			fmt.Println("exiting on purpose")
			os.Exit(3)
		}()
	}
	if *childPIDFile != "" {
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), "DUET_FAKE=sleep")
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := os.WriteFile(*childPIDFile, []byte(strconv.Itoa(child.Process.Pid)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	start := time.Now()
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		_, statErr := os.Stat(*healthFile)
		if *failHealth || (*unhealthyAfter > 0 && time.Since(start) > *unhealthyAfter) || (*healthFile != "" && statErr != nil) {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("/cache-size", func(w http.ResponseWriter, r *http.Request) {
		if *cacheSize == 0 {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, *cacheSize)
	})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(*modelsFile)
		if *modelsFile == "" || err != nil {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	})
	err := http.ListenAndServe(net.JoinHostPort(*host, strconv.Itoa(*port)), mux)
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// fakeParent launches one fake worker on $DUET_FAKE_PORT, prints "pid N"
// for it and waits to be killed.
func fakeParent() int {
	port := os.Getenv("DUET_FAKE_PORT")
	cfg := Defaults()
	cfg.RunDir = os.Getenv("DUET_FAKE_DIR")
	cfg.Context = fakePool(1, []string{port})
	cfg.Generation.Count = 0
	f, err := New(cfg, Options{})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if err := f.Start(context.Background()); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Printf("pid %d\n", f.Snapshot()[0].PID)
	select {}
}

// fakePool is a command pool of n fake workers on the given ports.
func fakePool(n int, ports []string, args ...string) PoolConfig {
	p := Defaults().Context
	p.Engine = EngineCommand
	p.Count = n
	p.Ports = ports
	p.Command = append([]string{os.Args[0], "--host", "{host}", "--port", "{port}", "--name", "{name}"}, args...)
	p.Env = []string{"DUET_FAKE=worker"}
	p.StartTimeout = 20 * time.Second
	p.Restart = RestartPolicy{Attempts: 3, Interval: time.Minute, Delay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Jitter: 0.5}
	return p
}
