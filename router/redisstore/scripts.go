package redisstore

import "github.com/redis/go-redis/v9"

// Key layout, under the configured prefix P:
//
//	P s:<session key>   hash  r: the record (record.go), e: the 8-byte end
//	                          of its previous prompt; expires session_ttl
//	                          after its last save
//	P px:<8-byte end>   zset  the sessions whose previous prompt ends there,
//	                          scored by their expiry (unix ms)
//	P replicas          zset  live replicas, scored by their last load
//	                          publication (unix ms, Redis's clock)
//	P load:<replica>    hash  worker identity -> tokens the replica charges
//	                          it; expires load_ttl after its publication
//	P workers           hash  worker identity -> the last admin change to it
//	                          (JSON, see WorkerChange)
//	P clock:<identity>  int   the tokens every replica booked on the ctx
//	                          worker's KV cache clock
//	                          (router.Endpoint.CacheClock); expires
//	                          session_ttl after the last replica that has
//	                          the worker synced (no session's mark can
//	                          refer to it then)
//
// Every script reads Redis's own clock (TIME), so replicas' clocks do not
// need to agree. The scripts name keys they build from ARGV, which a Redis
// Cluster refuses: duet needs one Redis server (or a primary with replicas).

// findSource returns {sessions, load}. sessions is the session ARGV[2] (as
// key, record) or, when it is "", the sessions whose previous prompt ends
// at one of the 8-byte ends packed in ARGV[6] (deepest first): the sessions at the first ARGV[4]
// ends that have any, skipping ends shared by more than ARGV[3] sessions (a
// common prefix names no one conversation); it drops index entries of
// expired sessions on its way. load is the live replicas' summed load but
// replica ARGV[5]'s, as othersLoad returns it: read on the routing path, it
// is as fresh as the other replicas' last publication.
const findSource = nowLua + othersLoadLua + `
local p = ARGV[1]
local loads = othersLoad(p, ARGV[5])
if ARGV[2] ~= '' then
  local r = redis.call('HGET', p .. 's:' .. ARGV[2], 'r')
  if r then return {{ARGV[2], r}, loads} end
  return {{}, loads}
end
local now = nowMs()
local maxPer, maxEnds = tonumber(ARGV[3]), tonumber(ARGV[4])
local out, ends = {}, 0
local packed = ARGV[6] or ''
for i = 1, #packed, 8 do
  local px = p .. 'px:' .. string.sub(packed, i, i + 7)
  if redis.call('EXISTS', px) == 1 then
    redis.call('ZREMRANGEBYSCORE', px, '-inf', now)
    local n = redis.call('ZCARD', px)
    if n > 0 and n <= maxPer then
      for _, k in ipairs(redis.call('ZRANGE', px, 0, -1)) do
        local r = redis.call('HGET', p .. 's:' .. k, 'r')
        if r then
          out[#out + 1] = k
          out[#out + 1] = r
        else
          redis.call('ZREM', px, k)
        end
      end
      ends = ends + 1
      if ends >= maxEnds then break end
    end
  end
end
return {out, loads}
`

// saveSource stores session ARGV[2]'s record ARGV[3], whose previous prompt
// ends at ARGV[4], for ARGV[5] ms, and moves it in the prefix index: out of
// the end it had, into the new one unless more than ARGV[6] live sessions
// are there already (then the end is a common prefix Find skips anyway).
const saveSource = nowLua + `
local p, key, rec, e, ttl, maxPer = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local now = nowMs()
local sk = p .. 's:' .. key
local old = redis.call('HGET', sk, 'e')
if old and old ~= e then redis.call('ZREM', p .. 'px:' .. old, key) end
redis.call('HSET', sk, 'r', rec, 'e', e)
redis.call('PEXPIRE', sk, ttl)
local px = p .. 'px:' .. e
redis.call('ZREMRANGEBYSCORE', px, '-inf', now)
if redis.call('ZSCORE', px, key) or redis.call('ZCARD', px) <= maxPer then
  redis.call('ZADD', px, now + ttl, key)
  redis.call('PEXPIRE', px, ttl)
end
return 1
`

// syncSource publishes replica ARGV[2]'s load for ARGV[3] ms (ARGV[6]
// onwards: ARGV[4] identity, tokens pairs), forgets replicas silent that
// long, adds the cache clock bookings (the identity, tokens pairs after
// the load's) to the clocks, which then expire in ARGV[5] ms, and returns
// {live replicas, the others' load (othersLoad), the workers hash, the
// clocks' totals in the order they were booked}.
const syncSource = nowLua + othersLoadLua + `
local p, me, ttl, nLoad, clockTTL = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = nowMs()
local reps = p .. 'replicas'
redis.call('ZADD', reps, now, me)
redis.call('ZREMRANGEBYSCORE', reps, '-inf', now - ttl)
local mine = p .. 'load:' .. me
redis.call('DEL', mine)
if nLoad > 0 then
  redis.call('HSET', mine, unpack(ARGV, 6, 5 + 2 * nLoad))
  redis.call('PEXPIRE', mine, ttl)
end
local totals = {}
for i = 6 + 2 * nLoad, #ARGV, 2 do
  local k = p .. 'clock:' .. ARGV[i]
  totals[#totals + 1] = redis.call('INCRBY', k, ARGV[i + 1])
  redis.call('PEXPIRE', k, clockTTL)
end
return {redis.call('ZCARD', reps), othersLoad(p, me), redis.call('HGETALL', p .. 'workers'), totals}
`

// nowLua defines nowMs: Redis's clock in unix milliseconds.
const nowLua = `
local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// othersLoadLua defines othersLoad(prefix, me): the load every live
// replica but me publishes, summed per worker identity, as a flat
// identity, tokens array. (A replica past load_ttl has left the replicas
// set at its peers' last sync, and its load hash has expired.)
const othersLoadLua = `
local function othersLoad(p, me)
  local sum = {}
  for _, r in ipairs(redis.call('ZRANGE', p .. 'replicas', 0, -1)) do
    if r ~= me then
      local f = redis.call('HGETALL', p .. 'load:' .. r)
      for i = 1, #f, 2 do sum[f[i]] = (sum[f[i]] or 0) + tonumber(f[i + 1]) end
    end
  end
  local out = {}
  for k, v in pairs(sum) do
    out[#out + 1] = k
    out[#out + 1] = string.format('%.0f', v)
  end
  return out
end
`

var (
	findScript = redis.NewScript(findSource)
	saveScript = redis.NewScript(saveSource)
	syncScript = redis.NewScript(syncSource)
)

// scriptSources lists every script, for loading them into Redis's cache.
// (Script.Load on a pipeline would clear the Script's hash: go-redis sets
// it from the reply, which a queued command does not have yet.)
var scriptSources = []string{findSource, saveSource, syncSource}
