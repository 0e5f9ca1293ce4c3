package workers

import (
	"bufio"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

const (
	tailLines   = 20   // lines kept for error messages
	tailLineMax = 1000 // bytes kept of one line
)

// output copies a worker's combined stdout and stderr to its log file, the
// debug log and a ring of its last lines. run is its goroutine, owned by
// the proc; finish joins it.
type output struct {
	name string
	r    *os.File // read end of the pipe
	file *os.File // the log file, closed by run
	log  *zap.Logger
	done chan struct{} // closed when run returns

	// mu guards lines and next.
	mu    sync.Mutex
	lines []string // ring of the last tailLines lines
	next  int      // ring write position once full
}

func newOutput(name string, r, file *os.File, log *zap.Logger) *output {
	return &output{name: name, r: r, file: file, log: log, done: make(chan struct{})}
}

// run copies until the pipe is closed by every writer or by finish.
func (o *output) run() {
	defer close(o.done)
	br := bufio.NewReaderSize(o.r, 64<<10)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			_, _ = o.file.Write(chunk)
			o.line(strings.TrimRight(string(chunk), "\r\n"))
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

func (o *output) line(s string) {
	if ce := o.log.Check(zapcore.DebugLevel, "worker output"); ce != nil {
		ce.Write(zap.String("worker", o.name), zap.String("line", s))
	}
	if len(s) > tailLineMax {
		s = s[:tailLineMax] + "..."
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.lines) < tailLines {
		o.lines = append(o.lines, s)
		return
	}
	o.lines[o.next] = s
	o.next = (o.next + 1) % tailLines
}

// finish waits up to timeout for run to reach the end of the output, cuts
// it short after that, records how the process exited in the log file and
// closes it.
func (o *output) finish(timeout time.Duration, exit string) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-o.done:
	case <-t.C:
		o.r.Close() // unblocks the read
		<-o.done
	}
	o.r.Close()
	_, _ = o.file.WriteString("--- duet: " + o.name + " exited: " + exit + "\n")
	o.file.Close()
}

// tail returns the last lines, oldest first.
func (o *output) tail() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.lines))
	out = append(out, o.lines[o.next:]...)
	return append(out, o.lines[:o.next]...)
}
