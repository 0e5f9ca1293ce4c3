package workers

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// drainTimeout bounds the wait for a worker's output after it exited: a
// process that escaped the group (setsid) may hold the pipe open.
const drainTimeout = 2 * time.Second

// proc is one run of a worker process. Its wait goroutine owns the
// exec.Cmd; done closes once the process has exited, its process group has
// been killed and its output drained.
type proc struct {
	pid  int
	done chan struct{}
	out  *output
	err  error // how the process exited; read only after done

	// mu guards exited.
	mu     sync.Mutex
	exited bool // the main process has exited: its group id may be reused once reaped
}

// startProc starts the worker described by s with its output going to its
// log file (truncated when fresh, else appended to), to the tail buffer and
// to log at debug level.
func startProc(s *WorkerSpec, fresh bool, log *zap.Logger) (*proc, error) {
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if fresh {
		flags |= os.O_TRUNC
	}
	logFile, err := os.OpenFile(s.LogPath, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log: %w", err)
	}
	fmt.Fprintf(logFile, "--- duet: starting %s at %s\n", s.Name, time.Now().Format(time.RFC3339))
	r, w, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("creating output pipe: %w", err)
	}
	cmd := exec.Command(s.Argv[0], s.Argv[1:]...)
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	w.Close() // the child holds its own copy
	if err != nil {
		r.Close()
		fmt.Fprintf(logFile, "--- duet: %v\n", err)
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", s.Argv[0], err)
	}
	p := &proc{pid: cmd.Process.Pid, done: make(chan struct{}), out: newOutput(s.Name, r, logFile, log)}
	go p.out.run()
	go p.wait(cmd)
	return p, nil
}

// wait is the process's wait goroutine; it joins the output goroutine.
func (p *proc) wait(cmd *exec.Cmd) {
	p.err = waitExit(cmd, func() {
		p.mu.Lock()
		p.exited = true
		p.mu.Unlock()
	})
	p.out.finish(drainTimeout, exitText(p.err))
	close(p.done)
}

// signal sends sig to the worker's process group while its main process
// has not exited.
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		_ = syscall.Kill(-p.pid, sig)
	}
}

// terminate sends SIGTERM to the process group, waits up to grace (or until
// hurry is closed; nil never is), sends SIGKILL, and returns once the
// process is gone.
func (p *proc) terminate(grace time.Duration, hurry <-chan struct{}) {
	p.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	case <-hurry:
	}
	p.signal(syscall.SIGKILL)
	<-p.done
}

// exitText describes how a process exited.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
