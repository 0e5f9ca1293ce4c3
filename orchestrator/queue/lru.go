package queue

import (
	"fmt"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// newLRU returns golang-lru's simplelru bounded to max entries (Add
// evicts the least recently added beyond it; Peek leaves recency alone),
// for the boost and fairness tables. max >= 1: the configuration is
// validated so.
func newLRU[V any](max int) *simplelru.LRU[string, V] {
	c, err := simplelru.NewLRU[string, V](max, nil)
	if err != nil {
		panic(fmt.Sprintf("queue: LRU of %d entries: %v", max, err)) // unreachable with a valid config
	}
	return c
}
