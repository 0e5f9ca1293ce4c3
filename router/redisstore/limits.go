package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Tenant limits shared by every replica (orchestrator/tenant defines the
// interface these methods implement). Keys, under the prefix P:
//
//	P b:<name>   hash  a token bucket: level l (tokens) at time t (unix
//	                   ms, Redis's clock); expires when it would be full
//	P c:<name>   zset  leases of requests in flight, scored by when they
//	                   expire (unix ms); a replica renews its own

// bucketSource charges ARGV[4] tokens to bucket ARGV[1] that refills at
// ARGV[2] tokens per ms up to ARGV[3]. Unless ARGV[5] is 1 (settle: always
// charge, a negative cost refunds), a bucket at or below zero refuses the
// charge. Returns {1 charged or 0 refused, the level after}.
const bucketSource = nowLua + `
local now = nowMs()
local rate, cap, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local v = redis.call('HMGET', ARGV[1], 'l', 't')
local level, at = tonumber(v[1]), tonumber(v[2])
if level == nil or at == nil then level, at = cap, now end
level = math.min(cap, level + math.max(0, now - at) * rate)
local ok = 1
if ARGV[5] ~= '1' and level <= 0 then ok = 0 else level = level - cost end
redis.call('HSET', ARGV[1], 'l', tostring(level), 't', now)
redis.call('PEXPIRE', ARGV[1], math.ceil((cap - level) / rate) + 1000)
return {ok, tostring(level)}
`

// leaseSource adds lease ARGV[2] to set ARGV[1] for ARGV[4] ms unless the
// set already holds ARGV[3] unexpired leases. Returns 1 when added.
const leaseSource = nowLua + `
local now = nowMs()
redis.call('ZREMRANGEBYSCORE', ARGV[1], '-inf', now)
if redis.call('ZCARD', ARGV[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', ARGV[1], now + tonumber(ARGV[4]), ARGV[2])
redis.call('PEXPIRE', ARGV[1], tonumber(ARGV[4]))
return 1
`

// renewSource extends the leases ARGV[3...] of set ARGV[1] that still
// exist to ARGV[2] ms from now.
const renewSource = nowLua + `
local now = nowMs()
for i = 3, #ARGV do redis.call('ZADD', ARGV[1], 'XX', now + tonumber(ARGV[2]), ARGV[i]) end
redis.call('PEXPIRE', ARGV[1], tonumber(ARGV[2]))
return 1
`

var (
	bucketScript = redis.NewScript(bucketSource)
	leaseScript  = redis.NewScript(leaseSource)
	renewScript  = redis.NewScript(renewSource)
)

// limitCall bounds one limit call by the configured timeout.
func (s *Store) limitCall(script *redis.Script, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Redis.Timeout)
	defer cancel()
	return s.call(ctx, script, args)
}

// TakeTokens charges cost tokens to the shared bucket name, which refills
// at perSecond up to capacity. Unless settle is set, a bucket at or below
// zero refuses (ok false) and charges nothing; settle always charges, and
// a negative cost refunds. level is the bucket after the call.
func (s *Store) TakeTokens(name string, perSecond, capacity, cost float64, settle bool) (ok bool, level float64, err error) {
	flag := "0"
	if settle {
		flag = "1"
	}
	res, err := s.limitCall(bucketScript, s.limitPrefix+"b:"+name, strconv.FormatFloat(perSecond/1000, 'g', -1, 64),
		strconv.FormatFloat(capacity, 'g', -1, 64), strconv.FormatFloat(cost, 'g', -1, 64), flag)
	if err != nil {
		return false, 0, err
	}
	reply, isList := res.([]any)
	if !isList || len(reply) != 2 {
		return false, 0, fmt.Errorf("redisstore: bucket reply %v", res)
	}
	charged, _ := reply[0].(int64)
	text, _ := reply[1].(string)
	level, err = strconv.ParseFloat(text, 64)
	if err != nil {
		return false, 0, fmt.Errorf("redisstore: bucket level %q: %w", text, err)
	}
	return charged == 1, level, nil
}

// AcquireLease adds lease id to the shared set name for lease unless the
// set already holds limit live leases.
func (s *Store) AcquireLease(name, id string, limit int, lease time.Duration) (bool, error) {
	res, err := s.limitCall(leaseScript, s.limitPrefix+"c:"+name, id, limit, lease.Milliseconds())
	if err != nil {
		return false, err
	}
	n, _ := res.(int64)
	return n == 1, nil
}

// RenewLeases extends the leases ids of set name to lease from now.
func (s *Store) RenewLeases(name string, ids []string, lease time.Duration) error {
	args := make([]any, 0, len(ids)+2)
	args = append(args, s.limitPrefix+"c:"+name, lease.Milliseconds())
	for _, id := range ids {
		args = append(args, id)
	}
	_, err := s.limitCall(renewScript, args...)
	return err
}

// ReleaseLease removes lease id from the set name.
func (s *Store) ReleaseLease(name, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Redis.Timeout)
	defer cancel()
	s.roundTrip.Add(1)
	if err := s.client.ZRem(ctx, s.limitPrefix+"c:"+name, id).Err(); err != nil {
		s.failed(err)
		return err
	}
	return nil
}

// LeaseOwner is this replica's prefix of lease ids, so that leases of
// several replicas never collide.
func (s *Store) LeaseOwner() string { return s.replica }
