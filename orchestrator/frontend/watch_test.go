package frontend

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (server, client net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server, err = ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

func TestWatchClientSeesTheClientLeave(t *testing.T) {
	server, client := tcpPair(t)
	ctx, stop := watchClient(server)
	defer stop()
	require.NoError(t, ctx.Err())
	require.NoError(t, client.Close())
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not see the client close")
	}
	require.ErrorIs(t, context.Cause(ctx), errClientGone)
}

func TestWatchClientErrPeeksWithoutWaitingForTheWatcher(t *testing.T) {
	server, client := tcpPair(t)
	ctx, stop := watchClient(server)
	defer stop()
	require.NoError(t, client.Close())
	require.Eventually(t, func() bool { return ctx.Err() != nil }, 5*time.Second, time.Millisecond)
	<-ctx.Done() // closed before Err reported it
}

func TestWatchClientConsumesNothingAndStopsCleanly(t *testing.T) {
	server, client := tcpPair(t)
	ctx, stop, watcherEnded := watch(server)
	_, err := client.Write([]byte("next request"))
	require.NoError(t, err)
	select {
	case <-watcherEnded: // it saw the bytes and ended without a verdict
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not end on bytes")
	}
	require.NotErrorIs(t, context.Cause(ctx), errClientGone, "bytes are not a verdict")
	stop()
	require.ErrorIs(t, ctx.Err(), context.Canceled, "stop ends the context")
	require.NotErrorIs(t, context.Cause(ctx), errClientGone, "bytes are not a verdict")
	buf := make([]byte, 32)
	require.NoError(t, server.SetReadDeadline(time.Now().Add(5*time.Second)))
	n, err := server.Read(buf)
	require.NoError(t, err, "the connection reads normally after the watch")
	require.Equal(t, "next request", string(buf[:n]), "the watch consumed nothing")
}

// BenchmarkWatchClient is the cost the watch adds to one request: start
// (a peek and a goroutine) and stop (a deadline wake-up and a join).
func BenchmarkWatchClient(b *testing.B) {
	server, _ := tcpPair(b)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		ctx, stop := watchClient(server)
		_ = ctx.Err()
		stop()
	}
}
