package redisstore

import (
	"errors"
	"strings"

	"github.com/duet-serve/duet/router"
)

// recordVersion starts every stored record; a record of another version
// is ignored (the session is routed as new), so replicas of two duet
// versions never misread each other. Version 3 holds the pins only.
const recordVersion = "3"

// encodeRecord renders a record as newline-separated fields (worker
// identities are URLs, which hold no newline): version, ctx, gen. The key
// is the Redis key, not a field.
func encodeRecord(r router.SessionRecord) string {
	return recordVersion + "\n" + r.Ctx + "\n" + r.Gen
}

var errRecord = errors.New("malformed session record")

// decodeRecord parses what encodeRecord wrote.
func decodeRecord(key, s string) (router.SessionRecord, error) {
	f := strings.Split(s, "\n")
	if len(f) != 3 || f[0] != recordVersion {
		return router.SessionRecord{}, errRecord
	}
	return router.SessionRecord{Key: key, Ctx: f[1], Gen: f[2]}, nil
}
