-- sluice's topics on Redis Streams (docs/redis_streams.md): the steps that
-- must be atomic, one script. Waiting (XREADGROUP BLOCK, BLPOP) happens
-- outside, in the client.
--
-- KEYS (one hash tag, so a topic lives on one Cluster shard):
--   1 the stream            <prefix>:{<topic>}:stream
--   2 the meta hash         <prefix>:{<topic>}:meta    appended, trimmed, dropped,
--                                                       dead:<channel>, dropped:<channel>,
--                                                       visibility:<channel> (ms),
--                                                       purged:<channel>,
--                                                       created, bound, cap, age and
--                                                       replicas (create), closed,
--                                                       removed_to (the newest entry
--                                                       retention or a cap removed)
--   3 the acked hash        <prefix>:{<topic>}:acked   channel -> messages acknowledged
--                                                       (or dead-lettered, or dropped) by it
--   4 the wake list         <prefix>:{<topic>}:wake    a token per ack, for a waiting append
--   5 the dead-letter stream <prefix>:{<topic>}:dead
--   6 the seek index        <prefix>:{<topic>}:index   a sorted set of checkpoints,
--                                                       "<id> <entries added up to it>"
--                                                       scored by the id's ms, one per
--                                                       1024 messages appended
-- ARGV: 1 operation, then its arguments.
-- A channel's unacknowledged count is appended - acked[channel]; the bound
-- compares the largest of those (the slowest channel) with the topic's bound.
-- Every operation that removes a message from a channel's unacknowledged
-- ones (ack, dead letter, a cap's drop, a channel deleted, a seek forward, a
-- purge) adds to its acked count and pushes the wake token, so an append
-- waiting at the bound retries; a seek back lowers it again.

local STREAM, META, ACKED, WAKE, DEAD, INDEX = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
                                               KEYS[6]
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

-- One token (never more) for the appends waiting at the bound.
local function wake()
  redis.call('RPUSH', WAKE, '1')
  redis.call('LTRIM', WAKE, -1, -1)
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

-- The field of a flat {name, value, ...} reply.
local function field(flat, name)
  for i = 1, #flat, 2 do
    if flat[i] == name then return flat[i + 1] end
  end
  return nil
end

-- XACK in slices (Lua's unpack has a limit on its results).
local function xack_all(ch, ids)
  local n = 0
  for i = 1, #ids, 1000 do
    n = n + redis.call('XACK', STREAM, ch, unpack(ids, i, math.min(i + 999, #ids)))
  end
  return n
end

-- The explicit caps: remove `entries`, the oldest entries of the stream (a
-- prefix of it). What every channel had acknowledged counts as trimmed; what
-- some channel had not (or, with no channel, everything) is dropped and
-- counted: per channel (dropped:<ch>, and as done for its acked count, so
-- the bound does not wait for messages that are gone) and for the topic.
-- Entries a consumer holds are acknowledged here, so its later XACK does not
-- count twice. Returns the number dropped.
local function drop_oldest(entries)
  local k = #entries
  local last = entries[k][1]
  local pos = {}
  for i, e in ipairs(entries) do pos[e[1]] = i end
  local needed, dropped = {}, 0
  local groups = redis.call('XINFO', 'GROUPS', STREAM)
  for _, g in ipairs(groups) do
    local name, delivered = field(g, 'name'), field(g, 'last-delivered-id')
    local lost = 0
    -- Not delivered yet: the entries after the last delivered one.
    for i = #entries, 1, -1 do
      if not less(delivered, entries[i][1]) then break end
      lost = lost + 1
      if not needed[i] then
        needed[i] = true
        dropped = dropped + 1
      end
    end
    -- Delivered and not acknowledged.
    local held = {}
    for _, p in ipairs(redis.call('XPENDING', STREAM, name, '-', last, k)) do
      local i = pos[p[1]]
      if i then
        held[#held + 1] = p[1]
        if not needed[i] then
          needed[i] = true
          dropped = dropped + 1
        end
      end
    end
    if #held > 0 then xack_all(name, held) end
    lost = lost + #held
    if lost > 0 then
      redis.call('HINCRBY', ACKED, name, lost)
      redis.call('HINCRBY', META, 'dropped:' .. name, lost)
    end
  end
  if #groups == 0 then dropped = k end
  -- Every id below the one after `last`: exactly these entries.
  local ms, seq = split(last)
  redis.call('XTRIM', STREAM, 'MINID', '=', string.format('%d-%d', ms, seq + 1))
  redis.call('HSET', META, 'removed_to', last)
  redis.call('ZREMRANGEBYSCORE', INDEX, '-inf', string.format('(%d', ms))
  if dropped > 0 then redis.call('HINCRBY', META, 'dropped', dropped) end
  if k > dropped then redis.call('HINCRBY', META, 'trimmed', k - dropped) end
  return dropped
end

-- The count cap: the oldest entries past CAP go.
local function cap_to(cap)
  local len = redis.call('XLEN', STREAM)
  if len <= cap then return 0 end
  return drop_oldest(redis.call('XRANGE', STREAM, '-', '+', 'COUNT', len - cap))
end

-- The age cap: entries older than AGE_MS by the server's clock (which made
-- their ids) go, at most 10,000 per call so that one script never holds the
-- server for long after a quiet spell; the next append or trim takes more.
local function cap_age(age_ms)
  local t = redis.call('TIME')
  local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - age_ms
  if cutoff <= 0 then return 0 end
  local old = redis.call('XRANGE', STREAM, '-', string.format('(%d-0', cutoff), 'COUNT', 10000)
  if #old == 0 then return 0 end
  return drop_oldest(old)
end

-- The tighter of a handle's setting and the one create recorded (a string,
-- or nil/false when none); 0 means none.
local function tighter(mine, recorded)
  local r = tonumber(recorded or '0') or 0
  if r > 0 and (mine == 0 or r < mine) then return r end
  return mine
end

-- The channel's visibility timeout (ms): its own, recorded by the
-- visibility op (sluice get --visibility), else the caller's.
local function visibility(ch, mine)
  return tonumber(redis.call('HGET', META, 'visibility:' .. ch) or mine)
end

-- Whether the topic exists: made by create, an append or a join, and not
-- destroyed since.
local function exists()
  return redis.call('EXISTS', STREAM, META) > 0
end

-- The error replies the client maps to kNotFound and kClosed.
local function no_topic()
  return redis.error_reply('NOTOPIC the topic does not exist (never made, or deleted)')
end
local function closed_topic()
  return redis.error_reply('CLOSED the topic is closed: it takes no more messages')
end

-- append BOUND CAP AGE_MS WAITED MUST_EXIST PAYLOAD...: adds the payloads
-- that fit under the bound, in order, then applies the caps (0: none). The bound is
-- the tighter of BOUND and the one create recorded (0: none). WAITED (1: the
-- caller was woken at the bound) passes the wake token on while room is
-- left, so every waiting append gets its turn. MUST_EXIST (1): NOTOPIC
-- rather than making the topic. A closed topic: CLOSED. Reply { added,
-- appended after, first id, dropped by the cap, replicas create recorded }:
-- added < count means the bound stopped it; the caller waits and appends
-- the rest. (WAIT for the replicas cannot run in a script: the caller sends
-- it after.)
if op == 'append' then
  local bound, cap, age = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local waited = ARGV[5] == '1'
  local m = redis.call('HMGET', META, 'appended', 'bound', 'closed', 'cap', 'age', 'replicas',
                       'appended_bytes')
  if m[3] then return closed_topic() end
  if ARGV[6] == '1' and not exists() then return no_topic() end
  bound = tighter(bound, m[2])
  cap = tighter(cap, m[4])
  age = tighter(age, m[5])
  local appended = tonumber(m[1] or '0')
  local room = #ARGV - 6
  if bound > 0 then
    local free = bound - behind(appended)
    if free < room then room = free end
    if room < 0 then room = 0 end
  end
  local first, bytes = '', 0
  for i = 1, room do
    local id = redis.call('XADD', STREAM, '*', 'd', ARGV[6 + i])
    if i == 1 then first = id end
    bytes = bytes + #ARGV[6 + i]
  end
  if room > 0 then
    -- Bytes are counted from the topic's first append on, or never (a
    -- topic an older sluice appended to has no exact total).
    if m[7] or appended == 0 then redis.call('HINCRBY', META, 'appended_bytes', bytes) end
    appended = redis.call('HINCRBY', META, 'appended', room)
    -- A seek checkpoint every 1024 messages: the newest id and how many
    -- entries were ever added up to it (Redis 7's entries-added), so that
    -- a seek counts from the nearest one instead of from an end.
    if math.floor(appended / 1024) > math.floor((appended - room) / 1024) then
      local info = redis.call('XINFO', 'STREAM', STREAM)
      local newest, added = field(info, 'last-generated-id'), field(info, 'entries-added')
      if added then
        redis.call('ZADD', INDEX, string.sub(newest, 1, string.find(newest, '-', 1, true) - 1),
                   newest .. ' ' .. string.format('%d', added))
      end
    end
  end
  local dropped = 0
  if cap > 0 then dropped = cap_to(cap) end
  if age > 0 then dropped = dropped + cap_age(age) end
  if waited and room > 0 and bound > 0 and behind(appended) < bound then wake() end
  return { room, appended, first, dropped, tonumber(m[6] or '0') }
end

-- create BOUND CAP AGE_MS REPLICAS CHANNEL...: makes the topic with these
-- channels (each sees every message), recording BOUND and the caps (0:
-- none) for every append and trim, which keep the tighter of these and
-- their own, and REPLICAS (0: none), which every append waits for (the
-- larger of it and the handle's). Reply 1, or 0 if the topic exists.
if op == 'create' then
  if exists() then return 0 end
  redis.call('HSET', META, 'created', '1', 'bound', ARGV[2], 'cap', ARGV[3], 'age', ARGV[4],
             'replicas', ARGV[5], 'appended', '0', 'appended_bytes', '0')
  for i = 6, #ARGV do
    redis.call('XGROUP', 'CREATE', STREAM, ARGV[i], '0', 'MKSTREAM')
    redis.call('HSET', ACKED, ARGV[i], '0')
  end
  return 1
end

-- close: no more appends (they get CLOSED); appends waiting at the bound are
-- woken to see it. Reply 1, or 0 if the topic does not exist.
if op == 'close' then
  if not exists() then return 0 end
  redis.call('HSET', META, 'closed', '1')
  wake()
  return 1
end

-- drained CHANNEL CONSUMER: 1 if the topic is closed and CONSUMER has had
-- every message of the channel: nothing after its last delivered entry,
-- and nothing pending with another consumer (which may come back to the
-- channel; also what CONSUMER gave back, held by CONSUMER~back or ~nack
-- until claimed), else 0.
if op == 'drained' then
  local ch, me = ARGV[2], ARGV[3]
  if redis.call('HGET', META, 'closed') ~= '1' then return 0 end
  local p = redis.pcall('XPENDING', STREAM, ch)
  if type(p) == 'table' and p.err then return p end
  for _, c in ipairs(p[4] or {}) do
    if c[1] ~= me and tonumber(c[2]) > 0 then return 0 end
  end
  local last = nil
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', STREAM)) do
    if field(g, 'name') == ch then last = field(g, 'last-delivered-id') end
  end
  if last == nil then return redis.error_reply('NOGROUP no channel ' .. ch) end
  if #redis.call('XRANGE', STREAM, '(' .. last, '+', 'COUNT', 1) > 0 then return 0 end
  return 1
end

-- join CHANNEL MUST_EXIST FROM: the channel's consumer group, made if new at
-- the oldest entry still retained (FROM '0'; its acked count starts at what
-- is no longer retained) or after the newest (FROM '$', StartFrom::kTail;
-- acked = appended). MUST_EXIST (1): NOTOPIC rather than making the topic.
-- Reply 1 if made, 0 if it existed.
if op == 'join' then
  local ch = ARGV[2]
  if ARGV[3] == '1' and not exists() then return no_topic() end
  local made = true
  -- ARGV[4]: '0' starts a new channel at the oldest retained entry, '$' after
  -- the newest (StartFrom::kTail).
  local from = ARGV[4] or '0'
  local ok = redis.pcall('XGROUP', 'CREATE', STREAM, ch, from, 'MKSTREAM')
  if type(ok) == 'table' and ok.err then
    if not string.find(ok.err, 'BUSYGROUP', 1, true) then return ok end
    made = false
  end
  -- A new group, or one made by hand: count from here.
  if made or redis.call('HEXISTS', ACKED, ch) == 0 then
    local appended = tonumber(redis.call('HGET', META, 'appended') or '0')
    local start = appended  -- made at the tail: nothing so far is its to read
    if not (made and from == '$') then start = appended - redis.call('XLEN', STREAM) end
    if start < 0 then start = 0 end
    redis.call('HSET', ACKED, ch, string.format('%d', start))
  end
  if made then return 1 end
  return 0
end

-- leave CHANNEL: deletes the channel (its consumer group and counters); it
-- no longer holds the bound or retention. Reply 1 if it existed.
if op == 'leave' then
  local ch = ARGV[2]
  local g = redis.pcall('XGROUP', 'DESTROY', STREAM, ch)
  local had = redis.call('HDEL', ACKED, ch)
  redis.call('HDEL', META, 'dead:' .. ch, 'dropped:' .. ch, 'visibility:' .. ch, 'purged:' .. ch)
  if had > 0 then wake() end
  if had > 0 or g == 1 then return 1 end
  return 0
end

-- channels: their names.
if op == 'channels' then
  return redis.call('HKEYS', ACKED)
end

-- ack CHANNEL CONSUMER LO HI ID...: acknowledges the ids CONSUMER holds,
-- or gave back and no one claimed since (CONSUMER~back, CONSUMER~nack:
-- see release) (LO and HI: the smallest and the largest of them); counts what was
-- pending (an id acked twice counts once) and wakes one waiting append. An
-- id another consumer holds now (claimed after the visibility timeout, or
-- replayed to it after a seek) is left alone: it is that consumer's
-- delivery, for its own ack or nack (XACK alone does not look at the
-- owner). Ids held by no one (acknowledged, dropped, or a deleted channel)
-- are ignored. Reply { the count, {id, holder, ...} of the ids another
-- consumer holds }.
if op == 'ack' then
  local ch, me = ARGV[2], ARGV[3]
  -- What CONSUMER gave back and no one has claimed since (see release) is
  -- still its own to acknowledge.
  local function own(name)
    return name == me or name == me .. '~back' or name == me .. '~nack'
  end
  -- The summary (a count per consumer): when no other consumer holds
  -- anything, every pending id given is CONSUMER's.
  local sum = redis.pcall('XPENDING', STREAM, ch)
  if type(sum) == 'table' and sum.err then
    if string.sub(sum.err, 1, 7) == 'NOGROUP' then return { 0, {} } end
    return sum
  end
  local shared = false
  for _, c in ipairs(sum[4] or {}) do
    if not own(c[1]) and tonumber(c[2]) > 0 then shared = true end
  end
  if not shared then
    local n = redis.call('XACK', STREAM, ch, unpack(ARGV, 6))
    if n > 0 then
      redis.call('HINCRBY', ACKED, ch, n)
      wake()
    end
    return { n, {} }
  end
  -- What CONSUMER holds from LO to HI: its own pending list, a page at a
  -- time (the ids of one batch are close).
  local mine, from = {}, ARGV[4]
  while true do
    local p = redis.pcall('XPENDING', STREAM, ch, from, ARGV[5], 1000, me)
    if type(p) == 'table' and p.err then
      if string.sub(p.err, 1, 7) == 'NOGROUP' then return { 0, {} } end
      return p
    end
    for _, e in ipairs(p) do mine[e[1]] = true end
    if #p < 1000 then break end
    from = '(' .. p[#p][1]
  end
  local ids, others = {}, {}
  for i = 6, #ARGV do
    local id = ARGV[i]
    if mine[id] then
      ids[#ids + 1] = id
    else
      -- Rarely here: another consumer's, or held by no one, or given back
      -- by CONSUMER, or an id written otherwise ("5" for "5-0").
      local p = redis.call('XPENDING', STREAM, ch, id, id, 1)
      if p[1] and own(p[1][2]) then
        ids[#ids + 1] = id
      elseif p[1] then
        others[#others + 1] = id
        others[#others + 1] = p[1][2]
      end
    end
  end
  local n = 0
  if #ids > 0 then n = xack_all(ch, ids) end
  if n > 0 then
    redis.call('HINCRBY', ACKED, ch, n)
    wake()
  end
  return { n, others }
end

-- release CHANNEL CONSUMER VIS_MS DELAY_MS COUNTED [ID...]: gives back
-- messages CONSUMER holds (the ids given, or all), unacknowledged, as if it
-- had held them for the channel's visibility timeout (VIS_MS if it has none
-- of its own) less DELAY_MS: the next claim by any consumer of the channel
-- once DELAY_MS has passed takes them. They wait for it under a consumer
-- of their own, which says how they were given back (the handle's memory
-- is not enough: another handle, or a call whose reply was lost):
-- CONSUMER~nack (COUNTED '1', nack: a failed delivery), where the count is
-- left as it is and that claim raises it, toward the dead letters; or
-- CONSUMER~back (COUNTED '0', a reader that gives back what it never
-- handed on), where the count is lowered by one first, so that claim
-- leaves it as it was. A message held for the timeout already (claimable:
-- another consumer could have claimed it) is not given back that way: the
-- claim that delivers it again counts that delivery. Given back already: a
-- give-back leaves it be (the count lowered once, a nack's delay and count
-- kept); a nack of one given back (~back) counts the failure after all
-- (the count raised back), and of one nacked (~nack) sets the new delay
-- (counted once). Ids held by no one of these are ignored (acknowledged,
-- claimed by another meanwhile). Reply: how many it gave back now.
if op == 'release' then
  local ch, me, counted = ARGV[2], ARGV[3], ARGV[6] == '1'
  local back, nacked = me .. '~back', me .. '~nack'
  local vis = visibility(ch, ARGV[4])
  local idle = string.format('%d', math.max(vis - tonumber(ARGV[5]), 0))
  -- What to do with a pending entry { id, owner, idle, count }: false to
  -- leave it, else the count to set (-1: as it is).
  local function count_for(e)
    if e[2] == me then
      if counted then return -1 end
      if e[3] < vis then return math.max(e[4] - 1, 0) end
      return false
    end
    if counted and e[2] == nacked then return -1 end
    if counted and e[2] == back then return e[4] + 1 end
    return false
  end
  local ids, counts = {}, {}
  local function consider(e)
    local c = count_for(e)
    if c then
      ids[#ids + 1] = e[1]
      counts[#ids] = c
    end
  end
  if #ARGV > 6 then
    -- An id named twice once: else one deleted from the stream by hand
    -- counted as dropped twice (below).
    local seen = {}
    for i = 7, #ARGV do
      if not seen[ARGV[i]] then
        seen[ARGV[i]] = true
        local p = redis.call('XPENDING', STREAM, ch, ARGV[i], ARGV[i], 1)
        if p[1] then consider(p[1]) end
      end
    end
  else
    local from = '-'
    while true do
      local p = redis.call('XPENDING', STREAM, ch, from, '+', 1000, me)
      for _, e in ipairs(p) do consider(e) end
      if #p < 1000 then break end
      from = '(' .. p[#p][1]
    end
  end
  -- IDLE: claimable once DELAY_MS has passed. JUSTID: the delivery count
  -- is not raised here (the claim that delivers it again raises it).
  -- An id held but deleted from the stream by hand: XCLAIM drops it from
  -- the pending list and does not return it; counted as dropped, as in
  -- claim and touch (else the channel's unacknowledged count kept it).
  local to = back
  if counted then to = nacked end
  local gone, same = 0, {}
  for i = 1, #ids do
    if counts[i] < 0 then
      same[#same + 1] = ids[i]
    else
      local r = redis.call('XCLAIM', STREAM, ch, to, '0', ids[i], 'IDLE', idle, 'RETRYCOUNT',
                           counts[i], 'JUSTID')
      if #r == 0 then gone = gone + 1 end
    end
  end
  for i = 1, #same, 1000 do
    local cmd = { 'XCLAIM', STREAM, ch, to, '0' }
    for j = i, math.min(i + 999, #same) do cmd[#cmd + 1] = same[j] end
    cmd[#cmd + 1] = 'IDLE'
    cmd[#cmd + 1] = idle
    cmd[#cmd + 1] = 'JUSTID'
    gone = gone + math.min(i + 999, #same) - i + 1 - #redis.call(unpack(cmd))
  end
  if gone > 0 then
    redis.call('HINCRBY', ACKED, ch, gone)
    redis.call('HINCRBY', META, 'dropped:' .. ch, gone)
    wake()
  end
  return #ids - gone
end

-- claim CHANNEL CONSUMER VIS_MS CURSOR COUNT MAX_DELIVERIES: takes over
-- messages another consumer has held unacknowledged for the channel's
-- visibility timeout (VIS_MS if it has none of its own). Those
-- delivered more than MAX_DELIVERIES times (counting this one) go to the
-- dead-letter stream (fields d, topic id, channel, deliveries) and count as
-- acknowledged by the channel. Entries deleted from the stream by hand
-- while pending (XAUTOCLAIM drops them) count as dropped. Once a scan is
-- complete (next cursor 0-0), consumers that hold nothing and did nothing
-- for that timeout are forgotten (a consumer is made again by its next
-- read), so handles that come and go do not pile up. Reply { next cursor,
-- {id, payload, deliveries}..., dead-lettered count, the timeout (ms) }.
if op == 'claim' then
  local ch, me = ARGV[2], ARGV[3]
  local max = tonumber(ARGV[7])
  local vis = visibility(ch, ARGV[4])
  local r = redis.call('XAUTOCLAIM', STREAM, ch, me, vis, ARGV[5], 'COUNT', ARGV[6])
  local out, dead = {}, 0
  for _, e in ipairs(r[2]) do
    local id, fields = e[1], e[2]
    local info = redis.call('XPENDING', STREAM, ch, id, id, 1)
    local deliveries = (info[1] and info[1][4]) or 1
    local payload = field(fields, 'd') or ''
    if deliveries > max then
      redis.call('XADD', DEAD, '*', 'd', payload, 'id', id, 'channel', ch, 'deliveries', deliveries)
      redis.call('XACK', STREAM, ch, id)
      dead = dead + 1
    else
      out[#out + 1] = { id, payload, deliveries }
    end
  end
  local gone = #(r[3] or {})
  if dead + gone > 0 then
    redis.call('HINCRBY', ACKED, ch, dead + gone)
    if dead > 0 then redis.call('HINCRBY', META, 'dead:' .. ch, dead) end
    if gone > 0 then redis.call('HINCRBY', META, 'dropped:' .. ch, gone) end
    wake()
  end
  if r[1] == '0-0' then
    for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', STREAM, ch)) do
      local name = field(c, 'name')
      if name ~= me and field(c, 'pending') == 0 and field(c, 'idle') > vis then
        redis.call('XGROUP', 'DELCONSUMER', STREAM, ch, name)
      end
    end
  end
  return { r[1], out, dead, vis }
end

-- touch CHANNEL CONSUMER VIS_MS ID...: the keep-alive of a consumer that
-- lives: of these ids, those CONSUMER still holds get their idle time reset
-- (XCLAIM to itself, JUSTID: the delivery count is not raised), so no other
-- consumer claims them while it works on them. Ownership is checked first,
-- in this script: an XCLAIM with min-idle 0 would take another consumer's
-- message (one claimed from us after a missed keep-alive, or acknowledged
-- and delivered to no one). An id held but deleted from the stream by hand
-- (XCLAIM drops it from the pending list) counts as dropped, as in claim.
-- Reply { the channel's visibility timeout (VIS_MS if it has none), {ids
-- CONSUMER no longer holds} }.
if op == 'touch' then
  local ch, me = ARGV[2], ARGV[3]
  local vis = visibility(ch, ARGV[4])
  if #ARGV < 5 then return { vis, {} } end
  local lo, hi = ARGV[5], ARGV[5]
  for i = 6, #ARGV do
    if less(ARGV[i], lo) then lo = ARGV[i] end
    if less(hi, ARGV[i]) then hi = ARGV[i] end
  end
  -- What CONSUMER holds from the smallest id to the largest (its pending
  -- list, a page at a time; the caller sends ids in order, so ranges are short).
  local mine, from = {}, lo
  while true do
    local p = redis.pcall('XPENDING', STREAM, ch, from, hi, 1000, me)
    if type(p) == 'table' and p.err then return p end
    for _, e in ipairs(p) do mine[e[1]] = true end
    if #p < 1000 then break end
    from = '(' .. p[#p][1]
  end
  local lost, held = {}, {}
  for i = 5, #ARGV do
    if mine[ARGV[i]] then held[#held + 1] = ARGV[i] else lost[#lost + 1] = ARGV[i] end
  end
  local gone = 0
  for i = 1, #held, 1000 do
    local cmd = { 'XCLAIM', STREAM, ch, me, '0' }
    for j = i, math.min(i + 999, #held) do cmd[#cmd + 1] = held[j] end
    cmd[#cmd + 1] = 'JUSTID'
    local claimed = {}
    for _, id in ipairs(redis.call(unpack(cmd))) do claimed[id] = true end
    for j = i, math.min(i + 999, #held) do
      if not claimed[held[j]] then
        lost[#lost + 1] = held[j]
        gone = gone + 1
      end
    end
  end
  if gone > 0 then
    redis.call('HINCRBY', ACKED, ch, gone)
    redis.call('HINCRBY', META, 'dropped:' .. ch, gone)
    wake()
  end
  return { vis, lost }
end

-- visibility CHANNEL MS: records the channel's visibility timeout, which
-- every consumer's claim, release and touch use from then on. NOGROUP if
-- the channel does not exist. Reply 1.
if op == 'visibility' then
  local ch = ARGV[2]
  local p = redis.pcall('XPENDING', STREAM, ch)
  if type(p) == 'table' and p.err then return p end
  redis.call('HSET', META, 'visibility:' .. ch, ARGV[3])
  return 1
end

-- trim AGE_MS: applies the age cap (0: none), then removes the entries
-- every channel has acknowledged (XTRIM MINID at the oldest entry some
-- channel has not; none without channels). Reply: entries removed.
if op == 'trim' then
  local aged = 0
  local age = tighter(tonumber(ARGV[2] or '0'), redis.call('HGET', META, 'age'))
  if age > 0 then
    local before = redis.call('XLEN', STREAM)
    cap_age(age)
    aged = before - redis.call('XLEN', STREAM)
  end
  local groups = redis.call('XINFO', 'GROUPS', STREAM)
  if #groups == 0 then return aged end
  local keep = nil  -- the oldest id some channel still needs (nil: none)
  for _, g in ipairs(groups) do
    local name, last = field(g, 'name'), field(g, 'last-delivered-id')
    local p = redis.call('XPENDING', STREAM, name)
    local need = nil
    if tonumber(p[1]) > 0 then
      need = p[2]
    else
      -- The entry after the last delivered one, if any: read, not computed
      -- (a position such as seek_time's "<ms>-18446744073709551615" has no
      -- successor a Lua number can spell).
      local nxt = redis.call('XRANGE', STREAM, '(' .. last, '+', 'COUNT', 1)
      if nxt[1] then need = nxt[1][1] end
    end
    if need ~= nil and (keep == nil or less(need, keep)) then keep = need end
  end
  -- The newest entry this removes, recorded for seek (what is gone).
  local newest, n
  if keep == nil then  -- every channel has had everything
    newest = redis.call('XREVRANGE', STREAM, '+', '-', 'COUNT', 1)
    n = redis.call('XTRIM', STREAM, 'MAXLEN', '=', 0)
  else
    newest = redis.call('XREVRANGE', STREAM, '(' .. keep, '-', 'COUNT', 1)
    n = redis.call('XTRIM', STREAM, 'MINID', '=', keep)
  end
  if n > 0 then
    redis.call('HINCRBY', META, 'trimmed', n)
    if newest[1] then
      redis.call('HSET', META, 'removed_to', newest[1][1])
      -- Checkpoints of removed entries are of no use to a seek any more.
      local ms = string.sub(newest[1][1], 1, string.find(newest[1][1], '-', 1, true) - 1)
      redis.call('ZREMRANGEBYSCORE', INDEX, '-inf', '(' .. ms)
    end
  end
  return n + aged
end

-- stats: { appended, retained, trimmed, dead-letter length, dropped,
-- {channel, acked, pending, dead-lettered, dropped, visibility (ms; 0:
-- none of its own), purged}..., recorded bound, closed (0/1), exists (0/1),
-- recorded cap, recorded age (ms), recorded replicas, appended bytes (-1:
-- unknown, appended to by a sluice that did not count them) }
if op == 'stats' then
  local m = redis.call('HMGET', META, 'appended', 'trimmed', 'dropped', 'bound', 'closed', 'cap',
                       'age', 'replicas', 'appended_bytes')
  local chans = {}
  local acked = redis.call('HGETALL', ACKED)
  for i = 1, #acked, 2 do
    local ch = acked[i]
    local p = redis.pcall('XPENDING', STREAM, ch)
    local pending = 0
    if type(p) == 'table' and not p.err then pending = tonumber(p[1]) end
    local c = redis.call('HMGET', META, 'dead:' .. ch, 'dropped:' .. ch, 'visibility:' .. ch,
                         'purged:' .. ch)
    chans[#chans + 1] = { ch, tonumber(acked[i + 1]), pending, tonumber(c[1] or '0'),
                          tonumber(c[2] or '0'), tonumber(c[3] or '0'), tonumber(c[4] or '0') }
  end
  local e = 0
  if exists() then e = 1 end
  local c = 0
  if m[5] then c = 1 end
  return { tonumber(m[1] or '0'), redis.call('XLEN', STREAM), tonumber(m[2] or '0'),
           redis.call('XLEN', DEAD), tonumber(m[3] or '0'), chans, tonumber(m[4] or '0'), c, e,
           tonumber(m[6] or '0'), tonumber(m[7] or '0'), tonumber(m[8] or '0'),
           tonumber(m[9] or ((tonumber(m[1] or '0') > 0) and '-1' or '0')) }
end

-- peek CHANNEL AFTER MAX [OUTSIDE]: the channel's unacknowledged messages in id order,
-- read only (no delivery, claim, position or consumer changes). AFTER '':
-- from the first one: its pending entries (held by any consumer, with
-- their delivery counts) merged with the entries after the group's last
-- delivered id. Else only those after AFTER (a caller pages with the last
-- id it got). Reply { {id, payload, deliveries, ...} of pending entries
-- after AFTER (at most MAX, in id order; entries deleted from the stream
-- left out), the XRANGE reply of the entries after START = the larger of
-- the last delivered id and AFTER (at most MAX less the pending entries at
-- or before START, which come before all of them; none while more pending
-- entries than MAX may follow) }. The caller merges the
-- two by id and keeps the first MAX. OUTSIDE '1': the caller reads the
-- entries after AFTER itself, with XRANGE in the same MULTI/EXEC right
-- after this script (a plain command's reply costs the server a third of
-- what passing it through Lua does); when AFTER is at or past the last
-- delivered id (START is AFTER), the reply's second element is then 1
-- instead of those entries. NOTOPIC, or NOGROUP for no channel.
if op == 'peek' then
  local ch, after, max = ARGV[2], ARGV[3], tonumber(ARGV[4])
  if redis.call('EXISTS', STREAM) == 0 then return no_topic() end
  local last = nil
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', STREAM)) do
    if field(g, 'name') == ch then
      last = field(g, 'last-delivered-id')
      break
    end
  end
  if last == nil then return redis.error_reply('NOGROUP no channel ' .. ch) end
  local start = last
  if after ~= '' and less(last, after) then start = after end
  local from = '-'
  if after ~= '' then from = '(' .. after end
  -- The pending ones, a page of XPENDING at a time until there are `max`
  -- or no more: one deleted from the stream by hand is left out, and those
  -- after it still come before the fresh ones (a page that stopped at `max`
  -- pending entries may have more after it: no fresh ones then).
  local held, first, n, all_seen = {}, 0, 0, false
  while n < max do
    local want = max - n
    local pend = redis.call('XPENDING', STREAM, ch, from, '+', string.format('%d', want))
    if #pend > 0 then
      -- The payloads: one XRANGE over the pending ids' span, at most as many
      -- entries as there are pending ones (all of them when they are dense,
      -- as a consumer's batch is); an id it did not reach, one lookup each.
      local span = redis.call('XRANGE', STREAM, pend[1][1], pend[#pend][1], 'COUNT', #pend)
      local j = 1
      local all_before = not less(start, pend[#pend][1])
      for _, p in ipairs(pend) do
        local id = p[1]
        while span[j] and span[j][1] ~= id and less(span[j][1], id) do j = j + 1 end
        local e = span[j]
        if not (e and e[1] == id) then e = redis.call('XRANGE', STREAM, id, id)[1] end
        if e then  -- else deleted from the stream by hand: left out
          held[#held + 1] = id
          held[#held + 1] = field(e[2], 'd') or ''
          held[#held + 1] = p[4]
          n = n + 1
          if all_before or not less(start, id) then first = first + 1 end
        end
      end
      from = '(' .. pend[#pend][1]
    end
    if #pend < want then
      all_seen = true
      break
    end
  end
  if ARGV[5] == '1' and start == after then return { held, 1 } end
  local fresh = {}
  if all_seen and max > first then
    fresh = redis.call('XRANGE', STREAM, '(' .. start, '+', 'COUNT',
                       string.format('%d', max - first))
  end
  return { held, fresh }
end

-- seek CHANNEL ID and purge CHANNEL: move the channel (its consumer group)
-- so that its next read delivers the first entry after ID ('$': after the
-- newest, as does an ID past it; purge: always after the newest), with
-- XGROUP SETID, and drop its pending entries (XACK: no consumer holds them
-- any more; a later ack of one by its old holder counts nothing, and its
-- keep-alive no longer finds it its own). The channel's unacknowledged
-- messages are then exactly the entries after its position, and its acked
-- count is moved by the difference (HINCRBY, so appended - acked stays
-- exact): a seek back makes the replayed entries count toward the bound
-- again; less unacknowledged than before (a seek forward, a purge) wakes the
-- appends waiting at the bound. An ID before the oldest retained entry
-- whose messages retention or a cap removed (recorded in removed_to; a
-- topic that has none recorded: whenever entries were removed) stops at the
-- last removed entry and says so. The count of the entries after the new
-- position costs nothing at the start or the end; elsewhere, the script
-- counts the shorter side of the stream, a page of 1000 from each end in
-- turn. Seek reply { position, the id of the first entry after it ('' if
-- none), clamped (0/1), pending entries dropped, unacknowledged now,
-- unacknowledged before }; purge reply: how many messages it dropped
-- (counted in purged:<channel>). NOTOPIC, or NOGROUP for no channel.
if op == 'seek' or op == 'purge' then
  local ch = ARGV[2]
  if redis.call('EXISTS', STREAM) == 0 then return no_topic() end
  local found = false
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', STREAM)) do
    if field(g, 'name') == ch then
      found = true
      break
    end
  end
  if not found then return redis.error_reply('NOGROUP no channel ' .. ch) end
  local dropped = 0
  while true do
    local p = redis.call('XPENDING', STREAM, ch, '-', '+', 1000)
    if #p == 0 then break end
    local ids = {}
    for i, e in ipairs(p) do ids[i] = e[1] end
    dropped = dropped + xack_all(ch, ids)
  end
  local info = redis.call('XINFO', 'STREAM', STREAM)
  local len, newest = field(info, 'length'), field(info, 'last-generated-id')
  local added = field(info, 'entries-added')  -- nil before Redis 7.0
  local oldest = field(info, 'first-entry')
  if oldest then oldest = oldest[1] else oldest = nil end
  local pos, clamped = newest, 0
  if op == 'seek' and ARGV[3] ~= '$' and less(ARGV[3], newest) then
    pos = ARGV[3]
    local removed_to = redis.call('HGET', META, 'removed_to')
    if removed_to then
      if less(pos, removed_to) then
        pos = removed_to
        clamped = 1
      end
    elseif (added or 0) > len and (oldest == nil or less(pos, oldest)) then
      clamped = 1  -- entries were removed, none recorded where: some may be after pos
    end
  end
  -- How many entries come after pos.
  local count = 0
  if oldest == nil or not less(pos, newest) then
    count = 0
  elseif less(pos, oldest) then
    count = len
  else
    -- The checkpoint nearest before pos (at most one per 1024 appended, so
    -- few share a millisecond), if it is still retained: the entries
    -- after pos are then those ever added less those up to it, counted
    -- from there. Three cursors in turn, a page each: from the checkpoint,
    -- from the oldest and from the newest entry; the first to reach pos
    -- gives the count, so it costs the shortest of the three.
    local cp, cp_added = nil, nil
    if added then
      local ms = string.sub(pos, 1, string.find(pos, '-', 1, true) - 1)
      local near = redis.call('ZREVRANGEBYSCORE', INDEX, ms, '-inf', 'LIMIT', 0, 8)
      for _, c in ipairs(near) do
        local sp = string.find(c, ' ', 1, true)
        local id = string.sub(c, 1, sp - 1)
        if not less(pos, id) and (cp == nil or less(cp, id)) then
          cp, cp_added = id, tonumber(string.sub(c, sp + 1))
        end
      end
      if cp ~= nil and less(cp, oldest) then cp = nil end
    end
    local front, back, mid, fstart, bstart = 0, 0, 0, '-', '+'
    local mstart = nil
    if cp ~= nil then mstart = '(' .. cp end
    while true do
      if mstart ~= nil then
        local m = redis.call('XRANGE', STREAM, mstart, pos, 'COUNT', 1000)
        mid = mid + #m
        if #m < 1000 then
          count = math.min(math.max(added - cp_added - mid, 0), len)
          break
        end
        mstart = '(' .. m[#m][1]
      end
      local f = redis.call('XRANGE', STREAM, fstart, pos, 'COUNT', 1000)
      front = front + #f
      if #f < 1000 then
        count = len - front
        break
      end
      fstart = '(' .. f[#f][1]
      local b = redis.call('XREVRANGE', STREAM, bstart, '(' .. pos, 'COUNT', 1000)
      back = back + #b
      if #b < 1000 then
        count = back
        break
      end
      bstart = '(' .. b[#b][1]
    end
  end
  if added then
    -- Redis's own lag (XINFO GROUPS) stays right too.
    redis.call('XGROUP', 'SETID', STREAM, ch, pos, 'ENTRIESREAD', string.format('%d', added - count))
  else
    redis.call('XGROUP', 'SETID', STREAM, ch, pos)
  end
  local appended = tonumber(redis.call('HGET', META, 'appended') or '0')
  local was = tonumber(redis.call('HGET', ACKED, ch) or '0')
  local now = appended - count
  if now < 0 then now = 0 end
  if now ~= was then redis.call('HINCRBY', ACKED, ch, string.format('%d', now - was)) end
  if now > was then wake() end
  if op == 'purge' then
    local n = appended - was
    if n < 0 then n = 0 end
    if n > 0 then redis.call('HINCRBY', META, 'purged:' .. ch, string.format('%d', n)) end
    return n
  end
  local next_id = ''
  local e = redis.call('XRANGE', STREAM, '(' .. pos, '+', 'COUNT', 1)
  if e[1] then next_id = e[1][1] end
  return { pos, next_id, clamped, dropped, appended - now, appended - was }
end

-- destroy: every key of the topic. Reply: keys removed.
if op == 'destroy' then
  return redis.call('DEL', STREAM, META, ACKED, WAKE, DEAD, INDEX)
end

return redis.error_reply('sluice stream script: unknown operation ' .. tostring(op))
