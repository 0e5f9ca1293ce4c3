//go:build linux

package workers

import (
	"os/exec"
	"syscall"
	"unsafe"
)

// sysProcAttr puts the worker in its own process group, so that signals
// reach the engine's own child processes too, and has the kernel SIGKILL it
// when duet dies, even by SIGKILL. (The parent the kernel watches is the OS
// thread that started the child; the Go runtime does not end threads of
// goroutines that never called runtime.LockOSThread, which this package
// never does.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

const pPID = 1 // idtype_t P_PID of waitid(2)

// waitExit waits for the worker's main process to exit, then calls exited,
// kills what is left of its process group and reaps it. The process is
// waited for with WNOWAIT first so that its pid, which is also the group
// id, stays reserved until the group has been swept.
func waitExit(cmd *exec.Cmd, exited func()) error {
	pid := cmd.Process.Pid
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			break
		}
	}
	exited()
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return cmd.Wait()
}
