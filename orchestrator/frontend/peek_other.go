//go:build !linux

package frontend

import "syscall"

// peerClosed and peerClosedNow are not implemented off Linux: they report
// false at once, and a disconnect is found by the next failed write.
func peerClosed(syscall.RawConn) bool    { return false }
func peerClosedNow(syscall.RawConn) bool { return false }
