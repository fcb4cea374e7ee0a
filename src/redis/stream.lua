-- sluice's topics on Redis Streams (docs/redis_streams.md): the steps that
-- must be atomic, one script. Waiting (XREADGROUP BLOCK, BLPOP) happens
-- outside, in the client.
--
-- KEYS (one hash tag, so a topic lives on one Cluster shard):
--   1 the stream            <prefix>:{<topic>}:stream
--   2 the meta hash         <prefix>:{<topic>}:meta    appended, trimmed
--   3 the acked hash        <prefix>:{<topic>}:acked   channel -> messages acknowledged
--                                                       (or dead-lettered) by it
--   4 the wake list         <prefix>:{<topic>}:wake    a token per ack, for a waiting append
--   5 the dead-letter stream <prefix>:{<topic>}:dead
-- ARGV: 1 operation, then its arguments.
-- A channel's unacknowledged count is appended - acked[channel]; the bound
-- compares the largest of those (the slowest channel) with the topic's bound.

local STREAM, META, ACKED, WAKE, DEAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op = ARGV[1]

-- The slowest channel's unacknowledged count (0 without channels).
local function behind(appended)
  local worst = 0
  local acked = redis.call('HVALS', ACKED)
  for i = 1, #acked do
    local b = appended - tonumber(acked[i])
    if b > worst then worst = b end
  end
  return worst
end

-- "ms-seq" as two numbers, for comparing ids.
local function split(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end
local function less(a, b)
  local am, as = split(a)
  local bm, bs = split(b)
  return am < bm or (am == bm and as < bs)
end

-- append BOUND PAYLOAD...: adds the payloads that fit under the bound (0:
-- none), in order. Reply { added, appended after, first id }: added < count
-- means the bound stopped it; the caller waits and appends the rest.
if op == 'append' then
  local bound = tonumber(ARGV[2])
  local appended = tonumber(redis.call('HGET', META, 'appended') or '0')
  local room = #ARGV - 2
  if bound > 0 then
    local free = bound - behind(appended)
    if free < room then room = free end
    if room < 0 then room = 0 end
  end
  local first = ''
  for i = 1, room do
    local id = redis.call('XADD', STREAM, '*', 'd', ARGV[2 + i])
    if i == 1 then first = id end
  end
  if room > 0 then appended = redis.call('HINCRBY', META, 'appended', room) end
  return { room, appended, first }
end

-- join CHANNEL: the channel's consumer group, made at the oldest entry still
-- retained if new; its acked count starts at what was trimmed before it.
-- Reply 1 if made, 0 if it existed.
if op == 'join' then
  local ch = ARGV[2]
  if redis.call('HEXISTS', ACKED, ch) == 1 then return 0 end
  local ok = redis.pcall('XGROUP', 'CREATE', STREAM, ch, '0', 'MKSTREAM')
  if type(ok) == 'table' and ok.err and not string.find(ok.err, 'BUSYGROUP', 1, true) then
    return ok
  end
  local appended = tonumber(redis.call('HGET', META, 'appended') or '0')
  redis.call('HSET', ACKED, ch, string.format('%d', appended - redis.call('XLEN', STREAM)))
  return 1
end

-- ack CHANNEL ID...: acknowledges; counts what was pending (an id acked
-- twice counts once) and wakes one waiting append. Reply: the count.
if op == 'ack' then
  local ch = ARGV[2]
  local n = redis.call('XACK', STREAM, ch, unpack(ARGV, 3))
  if n > 0 then
    redis.call('HINCRBY', ACKED, ch, n)
    redis.call('RPUSH', WAKE, '1')
    redis.call('LTRIM', WAKE, -1, -1)
  end
  return n
end

-- claim CHANNEL CONSUMER IDLE_MS CURSOR COUNT MAX_DELIVERIES: takes over
-- messages another consumer has held unacknowledged for IDLE_MS. Those
-- delivered more than MAX_DELIVERIES times (counting this one) go to the
-- dead-letter stream (fields d, topic id, channel, deliveries) and count as
-- acknowledged by the channel. Reply { next cursor, {id, payload,
-- deliveries}..., dead-lettered count }.
if op == 'claim' then
  local ch, me = ARGV[2], ARGV[3]
  local max = tonumber(ARGV[7])
  local r = redis.call('XAUTOCLAIM', STREAM, ch, me, ARGV[4], ARGV[5], 'COUNT', ARGV[6])
  local out, dead = {}, 0
  for _, e in ipairs(r[2]) do
    local id, fields = e[1], e[2]
    local info = redis.call('XPENDING', STREAM, ch, id, id, 1)
    local deliveries = (info[1] and info[1][4]) or 1
    local payload = ''
    for i = 1, #fields, 2 do
      if fields[i] == 'd' then payload = fields[i + 1] end
    end
    if deliveries > max then
      redis.call('XADD', DEAD, '*', 'd', payload, 'id', id, 'channel', ch, 'deliveries', deliveries)
      redis.call('XACK', STREAM, ch, id)
      dead = dead + 1
    else
      out[#out + 1] = { id, payload, deliveries }
    end
  end
  if dead > 0 then
    redis.call('HINCRBY', ACKED, ch, dead)
    redis.call('HINCRBY', META, 'dead:' .. ch, dead)
    redis.call('RPUSH', WAKE, '1')
    redis.call('LTRIM', WAKE, -1, -1)
  end
  return { r[1], out, dead }
end

-- trim: removes the entries every channel has acknowledged (XTRIM MINID at
-- the oldest entry some channel has not); none without channels. Reply:
-- entries removed.
if op == 'trim' then
  local groups = redis.call('XINFO', 'GROUPS', STREAM)
  if #groups == 0 then return 0 end
  local keep = nil  -- the oldest id some channel still needs
  for _, g in ipairs(groups) do
    local name, last
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    local p = redis.call('XPENDING', STREAM, name)
    local need
    if tonumber(p[1]) > 0 then
      need = p[2]
    else
      -- The entry after the last delivered one (written with %d: Lua prints
      -- numbers with %.14g).
      local ms, seq = split(last)
      need = string.format('%d-%d', ms, seq + 1)
    end
    if keep == nil or less(need, keep) then keep = need end
  end
  local n = redis.call('XTRIM', STREAM, 'MINID', keep)
  if n > 0 then redis.call('HINCRBY', META, 'trimmed', n) end
  return n
end

-- stats: { appended, retained, trimmed, dead-letter length, {channel, acked,
-- pending, dead-lettered}... }
if op == 'stats' then
  local m = redis.call('HMGET', META, 'appended', 'trimmed')
  local chans = {}
  local acked = redis.call('HGETALL', ACKED)
  for i = 1, #acked, 2 do
    local ch = acked[i]
    local p = redis.pcall('XPENDING', STREAM, ch)
    local pending = 0
    if type(p) == 'table' and not p.err then pending = tonumber(p[1]) end
    chans[#chans + 1] = { ch, tonumber(acked[i + 1]), pending,
                          tonumber(redis.call('HGET', META, 'dead:' .. ch) or '0') }
  end
  return { tonumber(m[1] or '0'), redis.call('XLEN', STREAM), tonumber(m[2] or '0'),
           redis.call('XLEN', DEAD), chans }
end

-- destroy: every key of the topic. Reply: keys removed.
if op == 'destroy' then
  return redis.call('DEL', STREAM, META, ACKED, WAKE, DEAD)
end

return redis.error_reply('sluice stream script: unknown operation ' .. tostring(op))
