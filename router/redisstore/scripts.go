package redisstore

import "github.com/redis/go-redis/v9"

// Key layout, under the configured prefix P:
//
//	P s:<session key>   string the record (record.go); expires
//	                          session_ttl after its last save
//	P replicas          zset  live replicas, scored by their last load
//	                          publication (unix ms, Redis's clock)
//	P load:<replica>    hash  worker identity -> tokens the replica charges
//	                          it; expires load_ttl after its publication
//	P workers           hash  worker identity -> the last admin change to it
//	                          (JSON, see WorkerChange)
//
// Every script reads Redis's own clock (TIME), so replicas' clocks do not
// need to agree. The scripts name keys they build from ARGV, which a Redis
// Cluster refuses: duet needs one Redis server (or a primary with replicas).

// findSource returns {record, sync}: the record of session ARGV[5] (false
// when there is none), and a sync's reply (syncLua, with ARGV[1-4] and the
// load pairs from ARGV[6]): the routing call is also this replica's load
// sync, and reads the others' load as fresh as their last publication.
const findSource = nowLua + othersLoadLua + syncLua + `
return {redis.call('GET', ARGV[1] .. 's:' .. ARGV[5]), sync(ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), 6)}
`

// syncSource is a sync (syncLua) with ARGV[1-4] and the load pairs from
// ARGV[5].
const syncSource = nowLua + othersLoadLua + syncLua + `
return sync(ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), 5)
`

// syncLua defines sync(p, me, ttl, nLoad, first): it publishes replica
// me's load for ttl ms (nLoad identity, tokens pairs from ARGV[first]),
// forgets replicas silent that long, and returns {live replicas, the
// others' load (othersLoad), the workers hash}.
const syncLua = `
local function sync(p, me, ttl, nLoad, first)
  local now = nowMs()
  local reps = p .. 'replicas'
  redis.call('ZADD', reps, now, me)
  redis.call('ZREMRANGEBYSCORE', reps, '-inf', now - ttl)
  local mine = p .. 'load:' .. me
  redis.call('DEL', mine)
  if nLoad > 0 then
    redis.call('HSET', mine, unpack(ARGV, first, first - 1 + 2 * nLoad))
    redis.call('PEXPIRE', mine, ttl)
  end
  return {redis.call('ZCARD', reps), othersLoad(p, me), redis.call('HGETALL', p .. 'workers')}
end
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
	syncScript = redis.NewScript(syncSource)
)

// scriptSources lists every script, for loading them into Redis's cache.
// (Script.Load on a pipeline would clear the Script's hash: go-redis sets
// it from the reply, which a queued command does not have yet.)
var scriptSources = []string{findSource, syncSource}
