package redisstore

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"

	"github.com/duet-serve/duet/router"
)

// recordVersion starts every stored record; a record of an unknown version
// is ignored (the session is routed as new), so replicas of two duet
// versions never misread each other. Version 2 added the ctx cache mark;
// version 1 records (duet before it) are read with none.
const (
	recordVersion   = "2"
	recordVersionV1 = "1"
)

// encodeRecord renders a record as newline-separated fields (worker
// identities are URLs, which hold no newline): version, ctx, gen, ctx held,
// gen held, end (hex), end depth, tail length, tail hash (hex), ctx mark.
// The key is the Redis key, not a field.
func encodeRecord(r router.SessionRecord) string {
	var b strings.Builder
	b.Grow(len(r.Ctx) + len(r.Gen) + 100)
	b.WriteString(recordVersion)
	for _, f := range []string{r.Ctx, r.Gen, strconv.Itoa(r.CtxHeld), strconv.Itoa(r.GenHeld),
		strconv.FormatUint(r.End, 16), strconv.Itoa(r.EndDepth), strconv.Itoa(r.TailLen), strconv.FormatUint(r.TailHash, 16),
		strconv.FormatInt(r.CtxMark, 10)} {
		b.WriteByte('\n')
		b.WriteString(f)
	}
	return b.String()
}

var errRecord = errors.New("malformed session record")

// decodeRecord parses what encodeRecord wrote, or a version 1 record.
func decodeRecord(key, s string) (router.SessionRecord, error) {
	f := strings.Split(s, "\n")
	if !(len(f) == 10 && f[0] == recordVersion) && !(len(f) == 9 && f[0] == recordVersionV1) {
		return router.SessionRecord{}, errRecord
	}
	r := router.SessionRecord{Key: key, Ctx: f[1], Gen: f[2]}
	var errs [7]error
	if len(f) == 10 {
		r.CtxMark, errs[6] = strconv.ParseInt(f[9], 10, 64)
	}
	r.CtxHeld, errs[0] = strconv.Atoi(f[3])
	r.GenHeld, errs[1] = strconv.Atoi(f[4])
	r.End, errs[2] = strconv.ParseUint(f[5], 16, 64)
	r.EndDepth, errs[3] = strconv.Atoi(f[6])
	r.TailLen, errs[4] = strconv.Atoi(f[7])
	r.TailHash, errs[5] = strconv.ParseUint(f[8], 16, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return router.SessionRecord{}, errRecord
	}
	return r, nil
}

// endKey is the 8-byte big-endian form of a block end, as the px: keys
// and the e field hold it.
func endKey(end uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], end)
	return string(b[:])
}
