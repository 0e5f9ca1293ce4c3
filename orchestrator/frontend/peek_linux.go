package frontend

import "syscall"

// peerClosed waits until the socket is readable and reports whether the
// peer closed it (end of stream or an error such as a reset), without
// consuming a byte. It returns false when data arrived or the wait was
// ended by a read deadline.
func peerClosed(rc syscall.RawConn) bool {
	var buf [1]byte
	closed := false
	err := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == syscall.EAGAIN || err == syscall.EINTR {
			return false // not readable yet: wait in the poller
		}
		closed = n == 0 || err != nil
		return true
	})
	return err == nil && closed
}
