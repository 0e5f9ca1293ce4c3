package frontend

import "syscall"

// peerClosed waits in the poller until the socket is readable and reports
// whether the peer closed it (end of stream, or an error such as a reset),
// without consuming a byte. It returns false when data arrived or a read
// deadline ended the wait.
func peerClosed(rc syscall.RawConn) bool {
	closed := false
	err := rc.Read(func(fd uintptr) bool {
		gone, readable := peek(fd)
		closed = gone
		return readable
	})
	return err == nil && closed
}

// peerClosedNow is peerClosed without the wait. It does not take the
// connection's read lock, so it may run while peerClosed waits.
func peerClosedNow(rc syscall.RawConn) bool {
	closed := false
	if rc.Control(func(fd uintptr) { closed, _ = peek(fd) }) != nil {
		return false
	}
	return closed
}

// peek looks at the socket without consuming: gone when the peer closed it,
// readable when there is something to see (data, end of stream, an error).
func peek(fd uintptr) (gone, readable bool) {
	var buf [1]byte
	n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return false, false
	}
	return n == 0 || err != nil, true
}
