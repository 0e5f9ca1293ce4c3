package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// learnedChannel (under the key prefix) carries what each replica's
// requests left in the workers' caches: every replica subscribes, so that
// its cache index estimate follows the whole fleet's traffic. Redis does
// not keep published messages: a replica that was not listening misses
// them, as its estimate would anyway.
const learnedChannel = "learned"

// subscribeWait bounds how long a starting store waits for its
// subscription (a first connection may take longer than a call's timeout).
const subscribeWait = 2 * time.Second

// maxLearnedBlocks bounds one message (a 2M-token prompt in 32-token
// blocks): a longer one is not a prompt any worker holds.
const maxLearnedBlocks = 1 << 16

// encodeLearned renders one message: the sending replica, NUL, the worker
// identities (URLs) separated by \x01, NUL, then the block hashes, 8 bytes
// each, big-endian.
func encodeLearned(replica string, identities []string, hashes []uint64) string {
	ids := strings.Join(identities, "\x01")
	var b strings.Builder
	b.Grow(len(replica) + len(ids) + 2 + 8*len(hashes))
	b.WriteString(replica)
	b.WriteByte(0)
	b.WriteString(ids)
	b.WriteByte(0)
	var h [8]byte
	for _, x := range hashes {
		binary.BigEndian.PutUint64(h[:], x)
		b.Write(h[:])
	}
	return b.String()
}

var errLearned = errors.New("malformed learned-blocks message")

// decodeLearned parses what encodeLearned wrote.
func decodeLearned(msg string) (replica string, identities []string, hashes []uint64, err error) {
	replica, rest, ok := strings.Cut(msg, "\x00")
	if !ok {
		return "", nil, nil, errLearned
	}
	ids, rest, ok := strings.Cut(rest, "\x00")
	if !ok || ids == "" || len(rest)%8 != 0 || len(rest)/8 > maxLearnedBlocks {
		return "", nil, nil, errLearned
	}
	identities = strings.Split(ids, "\x01")
	hashes = make([]uint64, len(rest)/8)
	for i := range hashes {
		hashes[i] = binary.BigEndian.Uint64([]byte(rest[8*i : 8*i+8]))
	}
	return replica, identities, hashes, nil
}

// subscribe subscribes to the learned channel and waits (a bounded time)
// for Redis to confirm, so that what other replicas publish from the first
// sync on reaches this one. go-redis resubscribes on its own after Redis
// comes back.
func (s *Store) subscribe(ctx context.Context) *redis.PubSub {
	sub := s.client.Subscribe(ctx, s.prefix+learnedChannel)
	ctx, cancel := context.WithTimeout(ctx, subscribeWait)
	defer cancel()
	_, _ = sub.Receive(ctx) // an error: Redis is down, and the subscription follows when it is back
	return sub
}

// listen passes the other replicas' learned blocks to the registered
// function until ctx ends, and closes sub.
func (s *Store) listen(ctx context.Context, sub *redis.PubSub) {
	defer func() { _ = sub.Close() }()
	msgs := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			s.deliverLearned(m.Payload)
		}
	}
}

// deliverLearned hands one message to the registered function, unless this
// replica sent it or it is malformed.
func (s *Store) deliverLearned(payload string) {
	replica, identities, hashes, err := decodeLearned(payload)
	fn := s.onLearned.Load()
	if err != nil || replica == s.replica || fn == nil {
		return
	}
	(*fn)(identities, hashes)
}
