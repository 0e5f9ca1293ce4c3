//go:build unix && !linux

package workers

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts the worker in its own process group. Outside Linux there
// is no parent-death signal: a duet killed with SIGKILL leaves its workers.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitExit reaps the worker's main process, then calls exited and kills
// what is left of its process group.
func waitExit(cmd *exec.Cmd, exited func()) error {
	err := cmd.Wait()
	exited()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return err
}
