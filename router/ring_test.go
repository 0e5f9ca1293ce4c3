package router

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/stretchr/testify/require"
)

// Regression (issue 11): the ring was keyed by positional worker names
// (ctx-0, ...), so two replicas whose worker lists were in a different order
// agreed on 0 of 20 sessions. Points now come from each worker's URL.
func TestReplicasAgreeWhateverTheWorkerOrderAndNames(t *testing.T) {
	urls := func(prefix string, n int) []string {
		var out []string
		for i := 0; i < n; i++ {
			out = append(out, fmt.Sprintf("http://10.0.%s.%d:8000", prefix, i))
		}
		return out
	}
	ctxURLs, genURLs := urls("1", 4), urls("2", 4)
	replica := func(seed uint64) (*HashRing, map[string]string) {
		rng := rand.New(rand.NewPCG(seed, seed))
		c, g := append([]string(nil), ctxURLs...), append([]string(nil), genURLs...)
		rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
		rng.Shuffle(len(g), func(i, j int) { g[i], g[j] = g[j], g[i] })
		var ms []Member
		urlOf := map[string]string{}
		for i, u := range c {
			id := fmt.Sprintf("ctx-%d", i) // names follow the (shuffled) config order
			ms = append(ms, Member{ID: id, URL: u, Role: disagg.RoleContext, Healthy: true})
			urlOf[id] = u
		}
		for i, u := range g {
			id := fmt.Sprintf("gen-%d", i)
			ms = append(ms, Member{ID: id, URL: u + "/", Role: disagg.RoleGeneration, Healthy: true}) // a trailing slash is the same worker
			urlOf[id] = u
		}
		p := NewPool()
		p.Sync(ms)
		return newHashRing(p, 100, 2), urlOf
	}
	a, urlA := replica(1)
	b, urlB := replica(2)
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("session-%d", i)
		for _, role := range []disagg.Role{disagg.RoleContext, disagg.RoleGeneration} {
			require.Equal(t, urlA[a.owner(role, key)], urlB[b.owner(role, key)], "%s on the %s ring", key, role)
		}
	}
}
