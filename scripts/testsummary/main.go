// Command testsummary reads `go test -json` on stdin and prints what a
// plain `go test` prints (each package's ok or FAIL line, and the output
// of failing tests), then a count of tests passed, failed and skipped. It
// exits 1 when any test or package failed, so `make test` fails with it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// event is one line of test2json's output (go doc test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	os.Exit(summarize(os.Stdin, os.Stdout))
}

// summarize copies the summary of the event stream in to out and returns
// the exit code.
func summarize(in io.Reader, out io.Writer) int {
	var passed, failed, skipped, failedPkgs int
	outputs := map[string][]string{} // package/test -> its output so far
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Fprintln(out, sc.Text()) // not JSON: a build error, say
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch {
		case e.Action == "output" && e.Test == "":
			if e.Output != "PASS\n" { // -json runs verbosely; a plain go test prints only ok
				fmt.Fprint(out, e.Output)
			}
		case e.Action == "output":
			outputs[key] = append(outputs[key], e.Output)
		case e.Test == "" && e.Action == "fail":
			failedPkgs++
		case e.Test == "": // a package's pass, or skip when it has no tests
		case e.Action == "pass":
			passed++
			delete(outputs, key)
		case e.Action == "skip":
			skipped++
			delete(outputs, key)
		case e.Action == "fail":
			failed++
			for _, line := range outputs[key] {
				fmt.Fprint(out, line)
			}
			delete(outputs, key)
		}
	}
	fmt.Fprintf(out, "\n%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || failedPkgs > 0 || sc.Err() != nil {
		return 1
	}
	return 0
}
