package registry

import "github.com/redis/go-redis/v9"

// The scripts take every time from the Redis server (TIME), never from a client: hosts with skewed
// clocks agree on how old a heartbeat is. Every key a script touches is passed in KEYS, and all of a
// project's keys share one hash tag, so the scripts also run on Redis Cluster.
//
// A key of the wrong type where a script expects a sorted set is garbage in the registry's own
// namespace: the writers (register, heartbeat) replace it and report it, so one bad key cannot
// keep the workers of a queue from registering or heartbeating.

// luaPrelude defines helpers shared by the scripts.
const luaPrelude = `
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fmt(n) return string.format('%.0f', n) end
local function keytype(k) return redis.call('TYPE', k)['ok'] end
local repaired = 0
local function zset(k)
  local t = keytype(k)
  if t ~= 'zset' and t ~= 'none' then redis.call('DEL', k); repaired = repaired + 1 end
end
`

// registerScript replaces the worker's record with a fresh ONLINE one, puts the worker into its
// queue's heartbeat set and the index, and takes it off the expiry list.
// KEYS: record, heartbeats, index, gone. ARGV: server ID, queue, hostname, pid, version,
// capabilities, labels, max concurrency, index member, format version.
// Returns {registered ms, repaired keys}.
var registerScript = redis.NewScript(luaPrelude + `
local ms = fmt(nowms())
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'server_id', ARGV[1], 'queue', ARGV[2], 'status', 'ONLINE',
  'hostname', ARGV[3], 'pid', ARGV[4], 'version', ARGV[5], 'capabilities', ARGV[6], 'labels', ARGV[7],
  'max_concurrency', ARGV[8], 'active', '0', 'total_completed', '0', 'total_failed', '0',
  'registered_ms', ms, 'last_heartbeat_ms', ms, 'v', ARGV[10])
zset(KEYS[2]); redis.call('ZADD', KEYS[2], ms, ARGV[1])
zset(KEYS[3]); redis.call('ZADD', KEYS[3], 0, ARGV[9])
zset(KEYS[4]); redis.call('ZREM', KEYS[4], ARGV[1])
return {ms, repaired}
`)

// heartbeatScript records one heartbeat of an ONLINE or DRAINING worker and answers its status. A
// counter that is not an integer (garbage) restarts from the delta and is reported.
// KEYS: record, heartbeats. ARGV: server ID, active, completed delta, failed delta.
// Returns {1, status, heartbeat ms, repaired} or {0, reason, detail} with reason absent (no
// record), offline, type (not a hash) or status (unknown status).
var heartbeatScript = redis.NewScript(luaPrelude + `
local t = keytype(KEYS[1])
if t == 'none' then return {0, 'absent', ''} end
if t ~= 'hash' then return {0, 'type', t} end
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'OFFLINE' then return {0, 'offline', st} end
if st ~= 'ONLINE' and st ~= 'DRAINING' then return {0, 'status', st or ''} end
local function add(field, delta)
  local v = redis.call('HGET', KEYS[1], field)
  if v and string.len(v) <= 18 and string.match(v, '^%d+$') then
    redis.call('HINCRBY', KEYS[1], field, delta)
  else
    repaired = repaired + 1
    redis.call('HSET', KEYS[1], field, delta)
  end
end
add('total_completed', ARGV[3])
add('total_failed', ARGV[4])
local ms = fmt(nowms())
redis.call('HSET', KEYS[1], 'active', ARGV[2], 'last_heartbeat_ms', ms)
zset(KEYS[2]); redis.call('ZADD', KEYS[2], ms, ARGV[1])
return {1, st, ms, repaired}
`)

// statusScript sets a live worker's status to ARGV[1], ONLINE or DRAINING (Drain, Undrain); a
// worker already there stays so, an OFFLINE one is refused.
// KEYS: record. ARGV: status. Returns {1} or {0, reason, detail} as heartbeatScript.
var statusScript = redis.NewScript(luaPrelude + `
local t = keytype(KEYS[1])
if t == 'none' then return {0, 'absent', ''} end
if t ~= 'hash' then return {0, 'type', t} end
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'OFFLINE' then return {0, 'offline', st} end
if st ~= 'ONLINE' and st ~= 'DRAINING' then return {0, 'status', st or ''} end
redis.call('HSET', KEYS[1], 'status', ARGV[1])
return {1}
`)

// deregisterScript sets the worker OFFLINE, takes it out of the heartbeat set, and lets its record
// expire after the retention. A record that is not a readable hash is garbage: it is taken out of
// the heartbeat set and left to expire too.
// KEYS: record, heartbeats, gone. ARGV: server ID, retention ms.
// Returns {0, 'absent'}, {2, 'offline'} (already OFFLINE; nothing changed), or {1, kind, detail}
// with kind ok, type (not a hash) or status (unknown status).
var deregisterScript = redis.NewScript(luaPrelude + `
if keytype(KEYS[2]) == 'zset' then redis.call('ZREM', KEYS[2], ARGV[1]) end
local t = keytype(KEYS[1])
if t == 'none' then return {0, 'absent', ''} end
local now = nowms()
local kind, detail = 'ok', ''
if t == 'hash' then
  local st = redis.call('HGET', KEYS[1], 'status')
  if st == 'OFFLINE' then return {2, 'offline', ''} end
  if st ~= 'ONLINE' and st ~= 'DRAINING' then kind, detail = 'status', st or '' end
  redis.call('HSET', KEYS[1], 'status', 'OFFLINE', 'deregistered_ms', fmt(now))
  redis.call('HDEL', KEYS[1], 'evicted_by')
else
  kind, detail = 'type', t
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
zset(KEYS[3]); redis.call('ZADD', KEYS[3], fmt(now + tonumber(ARGV[2])), ARGV[1])
return {1, kind, detail}
`)

// evictScript evicts the given workers whose heartbeat is still older than the threshold by the
// server's time now: a worker that heartbeated since the caller listed it is left alone. It refuses
// to act for a fencing token lower than the highest one that evicted on the queue before.
// KEYS: heartbeats, fence, gone, then the records of the n valid members.
// ARGV: token, evict-after ms, retention ms, n, the n valid members (server IDs), then members that
// are not valid server IDs (garbage: removed from the set when stale, no record touched).
// Returns {-1, stored token} when superseded, else {1, now ms, then per evicted member: member,
// age ms, record type ('hash', 'none', another type, or 'garbage' for an invalid member)}.
var evictScript = redis.NewScript(luaPrelude + `
local ft = keytype(KEYS[2])
if ft == 'string' then
  local cur = redis.call('GET', KEYS[2])
  local n = tonumber(cur)
  if n and n > tonumber(ARGV[1]) then return {-1, cur} end
elseif ft ~= 'none' then
  redis.call('DEL', KEYS[2])
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
local now = nowms()
local out = {1, fmt(now)}
if keytype(KEYS[1]) ~= 'zset' then return out end
zset(KEYS[3])
local after, keep, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local function stale(m)
  local s = tonumber(redis.call('ZSCORE', KEYS[1], m))
  if s and now - s > after then
    redis.call('ZREM', KEYS[1], m)
    return now - s
  end
  return nil
end
for i = 1, n do
  local m, k = ARGV[4 + i], KEYS[3 + i]
  local age = stale(m)
  if age then
    local t = keytype(k)
    if t == 'hash' then
      redis.call('HSET', k, 'status', 'OFFLINE', 'deregistered_ms', fmt(now), 'evicted_by', ARGV[1])
    end
    if t ~= 'none' then redis.call('PEXPIRE', k, ARGV[3]) end
    redis.call('ZADD', KEYS[3], fmt(now + keep), m)
    table.insert(out, m); table.insert(out, fmt(age)); table.insert(out, t)
  end
end
for i = 5 + n, #ARGV do
  local age = stale(ARGV[i])
  if age then table.insert(out, ARGV[i]); table.insert(out, fmt(age)); table.insert(out, 'garbage') end
end
return out
`)

// pruneGoneScript removes the index entries of OFFLINE workers whose record has expired. An entry
// whose record still exists is rescheduled to its key's expiry, or dropped from the list when the key
// no longer expires (PTTL -1: the worker registered again). A record in its last millisecond still
// exists inside a script, with PTTL 0: it is rescheduled to now, and the next pass prunes it.
// KEYS: gone, index, then the records. ARGV: pairs of server ID and index member.
// Returns the number of index entries removed.
var pruneGoneScript = redis.NewScript(luaPrelude + `
local now, pruned = nowms(), 0
for i = 3, #KEYS do
  local id, member = ARGV[2 * (i - 2) - 1], ARGV[2 * (i - 2)]
  if redis.call('EXISTS', KEYS[i]) == 0 then
    if keytype(KEYS[2]) == 'zset' then redis.call('ZREM', KEYS[2], member) end
    redis.call('ZREM', KEYS[1], id)
    pruned = pruned + 1
  else
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl >= 0 then redis.call('ZADD', KEYS[1], fmt(now + ttl), id) else redis.call('ZREM', KEYS[1], id) end
  end
end
return pruned
`)

// pruneIndexScript removes index entries whose record no longer exists, atomically with the check, so
// that a worker registering meanwhile keeps its entry.
// KEYS: index, then the records. ARGV: the index members. Returns the number removed.
var pruneIndexScript = redis.NewScript(`
local pruned = 0
if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' then return 0 end
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    pruned = pruned + redis.call('ZREM', KEYS[1], ARGV[i - 1])
  end
end
return pruned
`)
