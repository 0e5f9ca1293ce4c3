package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// maxMessageBytes bounds one ZeroMQ message (all its frames) on every socket
// this package opens. zmq4 allocates a frame's declared size before reading
// it, so an unchecked peer could make it allocate up to 2^63 bytes (and crash
// the process); the bounded transport below refuses such a frame first.
const maxMessageBytes = MaxPayloadBytes + 1<<20

// zmtpGreeting is the size of the ZMTP 3 greeting that precedes the frames.
const zmtpGreeting = 64

// Schemes of the bounded transports, registered with zmq4 once.
const (
	schemeTCP = "duet-kv-tcp"
	schemeIPC = "duet-kv-ipc"
)

var registerOnce sync.Once

// boundedEndpoint maps a tcp:// or ipc:// endpoint onto the bounded transport;
// other schemes (inproc://) pass through.
func boundedEndpoint(ep string) string {
	registerOnce.Do(func() {
		// Errors mean the names are taken, which only a second registration
		// from this package could do.
		_ = zmq4.RegisterTransport(schemeTCP, boundedTransport{inner: transport.New("tcp"), network: "tcp"})
		_ = zmq4.RegisterTransport(schemeIPC, boundedTransport{inner: transport.New("unix"), network: "unix"})
	})
	switch {
	case strings.HasPrefix(ep, "tcp://"):
		return schemeTCP + ep[len("tcp"):]
	case strings.HasPrefix(ep, "ipc://"):
		return schemeIPC + ep[len("ipc"):]
	default:
		return ep
	}
}

// boundedTransport is a net transport whose connections fail a read that
// would start a ZeroMQ message larger than maxMessageBytes.
type boundedTransport struct {
	inner   transport.Transport
	network string
}

func (t boundedTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := d.DialContext(ctx, t.network, addr)
	if err != nil {
		return nil, err
	}
	return &boundedConn{Conn: c}, nil
}

func (t boundedTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := t.inner.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return boundedListener{Listener: l}, nil
}

func (t boundedTransport) Addr(ep string) (string, error) { return t.inner.Addr(ep) }

type boundedListener struct{ net.Listener }

func (l boundedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &boundedConn{Conn: c}, nil
}

// errOversize is a net.Error, not a timeout, so zmq4 closes the connection.
type errOversize struct{ size uint64 }

func (e errOversize) Error() string {
	return fmt.Sprintf("kvevents: ZeroMQ message of at least %d bytes exceeds %d", e.size, maxMessageBytes)
}
func (errOversize) Timeout() bool   { return false }
func (errOversize) Temporary() bool { return false }

// boundedConn tracks the ZMTP framing of the bytes it reads: after the
// greeting, each frame is a flags byte, a 1-byte or (flag 0x02) 8-byte
// big-endian size, and the body; flag 0x01 means more frames follow in the
// same message. Reads are made by one goroutine (zmq4's connection reader).
type boundedConn struct {
	net.Conn
	greeting int    // greeting bytes still to pass
	body     uint64 // body bytes still to pass in the current frame
	hdr      [9]byte
	hdrLen   int    // header bytes collected so far
	msgSize  uint64 // bytes of the current message so far
	failed   error
}

func (c *boundedConn) Read(p []byte) (int, error) {
	if c.failed != nil {
		return 0, c.failed
	}
	n, err := c.Conn.Read(p)
	if ferr := c.scan(p[:n]); ferr != nil {
		c.failed = ferr
		return 0, ferr
	}
	return n, err
}

func (c *boundedConn) scan(b []byte) error {
	for len(b) > 0 {
		if c.greeting < zmtpGreeting {
			k := min(zmtpGreeting-c.greeting, len(b))
			c.greeting += k
			b = b[k:]
			continue
		}
		if c.body > 0 {
			k := uint64(len(b))
			if k > c.body {
				k = c.body
			}
			c.body -= k
			b = b[k:]
			continue
		}
		c.hdr[c.hdrLen] = b[0]
		c.hdrLen++
		b = b[1:]
		long := c.hdr[0]&0x02 != 0
		want := 2
		if long {
			want = 9
		}
		if c.hdrLen < want {
			continue
		}
		size := uint64(c.hdr[1])
		if long {
			size = binary.BigEndian.Uint64(c.hdr[1:9])
		}
		more := c.hdr[0]&0x01 != 0 && c.hdr[0]&0x04 == 0 // commands are single frames
		c.hdrLen = 0
		if size > maxMessageBytes || c.msgSize+size > maxMessageBytes {
			return errOversize{size: c.msgSize + size}
		}
		c.msgSize += size
		if !more {
			c.msgSize = 0
		}
		c.body = size
	}
	return nil
}
