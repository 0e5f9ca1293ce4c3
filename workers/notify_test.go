package workers

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNotifierCoalescesAndCloses(t *testing.T) {
	var n notifier
	a, cancelA := n.subscribe()
	b, cancelB := n.subscribe()
	n.notify()
	n.notify() // coalesced with the pending signal
	require.Len(t, a, 1)
	require.Len(t, b, 1)
	<-a

	cancelA()
	cancelA() // idempotent
	_, open := <-a
	require.False(t, open, "unsubscribing closes the channel")
	n.notify() // does not panic on the closed subscriber

	n.close()
	n.close()
	<-b // the pending signal
	_, open = <-b
	require.False(t, open, "close closes every channel")
	cancelB()

	c, cancelC := n.subscribe()
	_, open = <-c
	require.False(t, open, "subscribing to a closed notifier gives a closed channel")
	cancelC()
}
