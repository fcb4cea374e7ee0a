-- sluice's pressure-protocol steps, one server-side script (docs/redis_keys.md).
-- Each call is one protocol step done atomically. An operation that can finish
-- at once takes the role, acts and gives it back in one script. A put that
-- must wait for room (a get for data) keeps the role across its wait, as the
-- protocol's clients do, and the script that finishes it gives it back; the
-- holder is recorded in :producer/:consumer so that repair can restore the
-- token of one that died. Scripts never block; the caller waits outside
-- (BLMOVE key key RIGHT RIGHT, which moves nothing) and calls again.
--
-- KEYS: 1 data, 2 :bound, 3 :producer, 4 :consumer, 5 :producer_free,
--       6 :consumer_free, 7 :stats:produced_messages, 8 :stats:produced_bytes,
--       9 :stats:consumed_messages, 10 :stats:consumed_bytes, 11 :not_full,
--       12 :closed, and for reliable gets 13 the consumer's in-flight list
--       (${prefix}:${name}:inflight:${consumer}, registered in the set
--       ${prefix}:${name}:inflight, its mark in the hash
--       ${prefix}:${name}:inflight_marks; none is one of the protocol's keys),
--       for create, delete, stats and purge 13 the count of purged messages
--       (${prefix}:${name}:purged: sluice's own, not the protocol's stats)
-- ARGV: 1 operation, 2 client id, 3.. operation arguments.
-- Reply: { status, ... } where status is OK, NOQUEUE, DELETED, INUSE, CLOSED,
--        FULL, EMPTY, EXISTS, REMNANTS, BUSY, NOTHELD, CHANGED, STALE or CLASH.
--
-- sluice's own keys (the in-flight registry and marks, :purged, :deleting)
-- are where another queue's data list lies if one is named 'N:purged' and
-- so on (the protocol allows any name). Theirs are lists and ours never
-- are: a list at one of ours is that queue's, never read, written or
-- deleted as ours (and a purge that could not be counted is refused).
--
-- A sluice delete that finds a role held closes the queue and waits for the
-- holder to leave (see 'delete'). Meanwhile ${prefix}:${name}:deleting (not
-- one of the protocol's keys) holds its id, with an expiry it renews at each
-- step of its wait: a put or get that finds the queue closed then answers
-- DELETED (the queue is going away), not CLOSED (its normal end), as it
-- answers NOQUEUE once the keys are gone. A deleter that dies leaves only a
-- closed queue once the expiry passes; one that gives up removes it.
--
-- An in-flight list's mark is the queue's produced_messages and bound when
-- the list was started ("<produced> <bound>"). The count only grows and the
-- bound never changes while a queue exists, so a list whose mark is ahead
-- of today's count, or names another bound, was taken from an earlier queue
-- of that name: deleted by a client that knows only the 12 keys, then made
-- again. Such a list is STALE: never requeued, acknowledged or appended to.
-- (All four counters cost twice the server time per get and ack, and tell
-- little more: a queue's consumed counts follow its produced ones.)

local DATA, BOUND, PRODUCER, CONSUMER = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local PFREE, CFREE = KEYS[5], KEYS[6]
local PMSG, PBYTES, CMSG, CBYTES = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local NOTFULL, CLOSED = KEYS[11], KEYS[12]
local op, id = ARGV[1], ARGV[2]
-- A role kept across a wait is recorded as id .. '+w', and every step that
-- gives such a role back writes the plain id again: so 'mine' is never what
-- a finished operation of this client left behind when another client pops
-- the token and has not yet written its own id (the existing clients SET
-- the holder one round trip after their BRPOP).
local mine = id .. '+w'
-- A sluice delete is under way (see the top). Only read on the cold paths.
local DELETING = DATA .. ':deleting'

-- The hot paths (put, get) avoid closures and redundant calls: each
-- redis.call costs about a microsecond of server time. When the operation
-- finishes in this script, the role token is checked rather than popped and
-- pushed back (inside one atomic script the two are indistinguishable from
-- outside), and :producer/:consumer are written only when they change (a
-- write costs twice a read).

-- put and get take a mode (ARGV[3]) for when they cannot finish at once:
--   'try'  never keeps the role (the protocol's non-blocking Put/Get);
--   'wait' takes the role and keeps it while the caller waits for room or
--          data, as the protocol's blocking Put/Get do (BRPOP the token, SET
--          the holder, then wait);
--   'held' the caller took the role in an earlier step and waited: it acts
--          if the role is still its own (token missing, holder = id) and
--          gives the role back once done. A role it lost (repair restored
--          it) is taken again like 'wait'.
-- 'wait' also acts as 'held' when the role is its own already: a 'wait' call
-- whose reply the caller never read (the connection broke after the script
-- ran) kept it, and the caller, not knowing, calls 'wait' again; taking that
-- for another holder's role would wait for ever on itself (ids are per
-- process and thread, and one thread makes one call at a time).
-- The reply's last element says whether the caller now holds the role.

if op == 'put' then
  -- ARGV[4..]: the messages.
  local got = redis.call('MGET', BOUND, PRODUCER)
  local b = got[1]
  local hold = ARGV[3] ~= 'try'
  local held = hold and got[2] == mine and redis.call('EXISTS', PFREE) == 0
  if not held then
    if not b then return {'NOQUEUE'} end
    -- One call answers both "is the role free" and "is it closed": 2*free + closed.
    local gate = redis.call('EXISTS', PFREE, PFREE, CLOSED)
    if gate < 2 then return {'INUSE'} end
    if got[2] ~= id then redis.call('SET', PRODUCER, id) end
    if gate == 3 then
      -- The mark is a string; a list there is a queue named 'N:deleting'.
      if redis.call('TYPE', DELETING).ok == 'string' then return {'DELETED'} end
      return {'CLOSED'}
    end
  elseif not b or redis.call('EXISTS', CLOSED) == 1 then
    -- Closed or deleted while we waited: give the role back (a deleter
    -- waits for it). Unlike the existing clients, push nothing (hazard 8).
    redis.call('LPUSH', PFREE, '0')
    redis.call('SET', PRODUCER, id)
    if not b then return {'NOQUEUE'} end
    if redis.call('TYPE', DELETING).ok == 'string' then return {'DELETED'} end
    return {'CLOSED'}
  end
  b = tonumber(b) or 0
  local n = #ARGV - 3
  local len
  if b > 0 then
    -- The atomic re-check: never past the bound, whatever :not_full says.
    len = redis.call('LLEN', DATA)
    if n > b - len then n = math.max(b - len, 0) end
    if n == 0 then
      redis.call('DEL', NOTFULL)  -- full: no token (a stale refill is undone)
      if hold and not held then
        redis.call('RPOP', PFREE)
        redis.call('SET', PRODUCER, mine)
      end
      return {'FULL', len, hold and 1 or 0}
    end
  end
  local bytes = 0
  local i = 4
  while i <= n + 3 do
    local j = math.min(i + 199, n + 3)  -- unpack() has a stack limit
    len = redis.call('LPUSH', DATA, unpack(ARGV, i, j))
    for k = i, j do bytes = bytes + #ARGV[k] end
    i = j + 1
  end
  redis.call('INCRBY', PMSG, n)
  redis.call('INCRBY', PBYTES, bytes)
  -- :not_full holds one element iff there is room (bound 0: never touched).
  -- Below the bound it is already there (every client refills it when a
  -- get makes room), so only reaching the bound needs a call.
  if b > 0 and len >= b then redis.call('DEL', NOTFULL) end
  if n == #ARGV - 3 then
    if held then
      redis.call('LPUSH', PFREE, '0')
      redis.call('SET', PRODUCER, id)
    end
    return {'OK', n, len, 0}
  end
  -- A prefix went in and the rest must wait for room: keep the role.
  if hold and not held then
    redis.call('RPOP', PFREE)
    redis.call('SET', PRODUCER, mine)
  end
  return {'OK', n, len, hold and 1 or 0}

elseif op == 'get' then
  -- ARGV[4]: how many at most; ARGV[5]: the reliable consumer's name.
  local reliable = KEYS[13]
  local got
  if reliable then
    got = redis.call('MGET', BOUND, CONSUMER, PMSG)
  else
    got = redis.call('MGET', BOUND, CONSUMER)
  end
  local b = got[1]
  local hold = ARGV[3] ~= 'try'
  local held = hold and got[2] == mine and redis.call('EXISTS', CFREE) == 0
  if not b then
    if held then redis.call('LPUSH', CFREE, '0'); redis.call('SET', CONSUMER, id) end  -- a deleter waits for it
    return {'NOQUEUE'}
  end
  if not held then
    if redis.call('EXISTS', CFREE) == 0 then return {'INUSE'} end
    if got[2] ~= id then redis.call('SET', CONSUMER, id) end
  end
  local items = redis.call('RPOP', DATA, tonumber(ARGV[4]))
  if not items then
    if redis.call('EXISTS', CLOSED) == 1 then
      if held then redis.call('LPUSH', CFREE, '0'); redis.call('SET', CONSUMER, id) end
      if redis.call('TYPE', DELETING).ok == 'string' then return {'DELETED'} end
      return {'CLOSED'}
    end
    if hold and not held then
      redis.call('RPOP', CFREE)
      redis.call('SET', CONSUMER, mine)
    end
    return {'EMPTY', hold and 1 or 0}
  end
  if reliable then
    -- Reliable get: the items move to this consumer's in-flight list in the
    -- same step, and count as consumed only when acknowledged.
    local len = redis.call('LPUSH', reliable, unpack(items))
    if len == #items then
      -- A new in-flight list: register its consumer so delete can find it,
      -- and mark it with the queue it is taken from (see the top). Where
      -- the registry is another queue's data list (one named 'N:inflight',
      -- see the top) the list could not be found: take nothing. Where the
      -- marks are, the list goes unmarked, as one from before marks.
      if type(redis.pcall('SADD', DATA .. ':inflight', ARGV[5])) == 'table' then
        redis.call('DEL', reliable)
        local back = {}
        for k = #items, 1, -1 do back[#back + 1] = items[k] end
        redis.call('RPUSH', DATA, unpack(back))
        if held then redis.call('LPUSH', CFREE, '0'); redis.call('SET', CONSUMER, id) end
        return {'CLASH', DATA .. ':inflight'}
      end
      redis.pcall('HSET', DATA .. ':inflight_marks', ARGV[5], (got[3] or '0') .. ' ' .. b)
    else
      -- It held messages already: they must be this queue's. (Inline, as
      -- in 'ack': no closures on the hot paths.) A mark that cannot be
      -- read (the marks are another queue's data) is no mark.
      local was = redis.pcall('HGET', DATA .. ':inflight_marks', ARGV[5])
      local m1, mb
      if type(was) == 'string' then m1, mb = string.match(was, '^(%d+) (.*)$') end
      if m1 and (mb ~= b or tonumber(m1) > (tonumber(got[3]) or 0)) then
        -- They went with a deleted queue: drop that list, and put this
        -- get's items back at the head of the queue, in order, untouched.
        redis.call('DEL', reliable)
        redis.call('HDEL', DATA .. ':inflight_marks', ARGV[5])
        redis.pcall('SREM', DATA .. ':inflight', ARGV[5])
        local back = {}
        for k = #items, 1, -1 do back[#back + 1] = items[k] end
        redis.call('RPUSH', DATA, unpack(back))
        if held then redis.call('LPUSH', CFREE, '0'); redis.call('SET', CONSUMER, id) end
        return {'STALE', len - #items}
      end
    end
  else
    local bytes = 0
    for k = 1, #items do bytes = bytes + #items[k] end
    redis.call('INCRBY', CMSG, #items)
    redis.call('INCRBY', CBYTES, bytes)
  end
  local len = redis.call('LLEN', DATA)
  b = tonumber(b) or 0
  -- Refill when this get made room (the queue was at or over the bound and
  -- is now below it); an over-filled queue stays blocked. Otherwise the
  -- token is already there.
  if b > 0 and len < b and len + #items >= b then
    local nf = redis.call('LLEN', NOTFULL)
    if nf == 0 then redis.call('LPUSH', NOTFULL, '0')
    elseif nf > 1 then redis.call('LTRIM', NOTFULL, 0, 0) end
  end
  if held then redis.call('LPUSH', CFREE, '0'); redis.call('SET', CONSUMER, id) end
  local reply = {'OK', len}
  for k = 1, #items do reply[k + 2] = items[k] end
  return reply

elseif op == 'ack' then
  -- KEYS[13]: the in-flight list of consumer ARGV[4]. Acknowledges its
  -- ARGV[3] oldest items. A stale list is dropped, never counted here.
  local v = redis.call('MGET', BOUND, PMSG)
  if not v[1] then return {'NOQUEUE'} end
  local was = redis.pcall('HGET', DATA .. ':inflight_marks', ARGV[4])  -- as in 'get'
  local m1, mb
  if type(was) == 'string' then m1, mb = string.match(was, '^(%d+) (.*)$') end
  if m1 and (mb ~= v[1] or tonumber(m1) > (tonumber(v[2]) or 0)) then
    local n = redis.call('LLEN', KEYS[13])
    redis.call('DEL', KEYS[13])
    redis.call('HDEL', DATA .. ':inflight_marks', ARGV[4])
    redis.pcall('SREM', DATA .. ':inflight', ARGV[4])
    return {'STALE', n}
  end
  local items = redis.call('RPOP', KEYS[13], tonumber(ARGV[3]))
  if not items then return {'NONE'} end
  local bytes = 0
  for k = 1, #items do bytes = bytes + #items[k] end
  redis.call('INCRBY', CMSG, #items)
  redis.call('INCRBY', CBYTES, bytes)
  return {'OK', #items}
end

-- Cold paths.
local function exists(k) return redis.call('EXISTS', k) == 1 end
local function bound() return tonumber(redis.call('GET', BOUND)) or 0 end
-- Whether `k`, one of sluice's own keys, may be used as ours: not a list,
-- which is the data of another queue named like it (see the top).
local function ours(k) return redis.call('TYPE', k).ok ~= 'list' end

-- Reliable consumers' keys (see the top).
local REG, MARKS = DATA .. ':inflight', DATA .. ':inflight_marks'
local function list_of(consumer) return REG .. ':' .. consumer end
-- The queue now: {produced_messages, bound} as strings.
local function now()
  local v = redis.call('MGET', PMSG, BOUND)
  v[1] = v[1] or '0'
  return v
end
-- Whether `mark` says its list was taken from an earlier queue of this
-- name. No mark (a list from before marks, or none): cannot tell, so no.
local function stale(mark, v)
  if not mark then return false end
  local m1, mb = string.match(mark, '^(%d+) (.*)$')
  if not m1 then return false end
  return mb ~= v[2] or tonumber(m1) > tonumber(v[1])
end
-- Removes a consumer's list, registration and mark; returns how many
-- messages the list held.
local function forget(consumer)
  local key = list_of(consumer)
  local n = redis.call('LLEN', key)
  redis.call('DEL', key)
  if ours(REG) then redis.call('SREM', REG, consumer) end
  if ours(MARKS) then redis.call('HDEL', MARKS, consumer) end
  return n
end
-- The consumers registered with in-flight lists.
local function registered()
  if not ours(REG) then return {} end
  return redis.call('SMEMBERS', REG)
end
-- Deletes those of sluice's own keys that are ours.
local function drop_own(...)
  for _, k in ipairs({...}) do
    if ours(k) then redis.call('DEL', k) end
  end
end

if op == 'close' then
  if not exists(BOUND) then return {'NOQUEUE'} end
  if not redis.call('RPOP', PFREE) then return {'INUSE'} end
  redis.call('SET', PRODUCER, id)
  local reply = {'CLOSED'}
  if not exists(CLOSED) then
    redis.call('LPUSH', CLOSED, '0', '0')
    reply = {'OK'}
  end
  redis.call('LPUSH', PFREE, '0')
  return reply

elseif op == 'create' then
  if exists(BOUND) then return {'EXISTS'} end
  local left = {}
  for k = 1, 12 do
    if k ~= 2 and exists(KEYS[k]) then left[#left + 1] = KEYS[k] end
  end
  if #left > 0 then return {'REMNANTS', unpack(left)} end
  -- In-flight lists of an earlier queue of this name, deleted by a client
  -- that knows only the 12 keys: their messages went with it.
  local gone = 0
  for _, c in ipairs(registered()) do gone = gone + forget(c) end
  drop_own(REG, MARKS, KEYS[13], DELETING)  -- and its purged count, a dead deleter's mark
  redis.call('SET', BOUND, ARGV[3])
  redis.call('LPUSH', PFREE, '0')
  redis.call('LPUSH', CFREE, '0')
  redis.call('LPUSH', NOTFULL, '0')
  return {'OK', gone}

elseif op == 'delete' then
  -- ARGV[3]: how long (ms) the :deleting mark outlives this step.
  if not exists(BOUND) then
    -- Deleted under our wait by another client (the protocol's Delete drops
    -- :bound first): a mark left now would outlive the queue, and make the
    -- next queue of this name, made and closed by a client that knows
    -- nothing of it, look deleted.
    drop_own(DELETING)
    return {'NOQUEUE'}
  end
  local pfree = redis.call('LLEN', PFREE)
  local cfree = redis.call('LLEN', CFREE)
  if pfree > 0 and cfree > 0 then
    local gone = redis.call('LLEN', DATA)
    redis.call('DEL', unpack(KEYS, 1, 12))
    -- In-flight lists of reliable consumers (see 'get').
    for _, c in ipairs(registered()) do
      gone = gone + redis.call('LLEN', list_of(c))
      redis.call('DEL', list_of(c))
    end
    drop_own(REG, MARKS, KEYS[13], DELETING)
    return {'OK', gone}
  end
  -- Someone is inside an operation (another client's blocking put or get):
  -- close and open the gates, as the protocol's Delete does, so it finishes.
  -- The mark tells a sluice waiter that this close is a delete (see the top).
  -- (No mark where another queue's data lies: its waiters then see a close.)
  if ours(DELETING) then redis.call('SET', DELETING, id, 'PX', tonumber(ARGV[3]) or 10000) end
  if not exists(CLOSED) then redis.call('LPUSH', CLOSED, '0', '0') end
  if bound() > 0 then
    redis.call('LPUSH', NOTFULL, '0')
    redis.call('LTRIM', NOTFULL, 0, 0)
  end
  return {'BUSY', pfree, cfree}

elseif op == 'undelete' then
  -- A delete that gave up waiting (the queue stays closed): its mark goes,
  -- unless another deleter's replaced it.
  if ours(DELETING) and redis.call('GET', DELETING) == id then redis.call('DEL', DELETING) end
  return {'OK'}

elseif op == 'requeue' then
  -- Puts every in-flight item of consumer ARGV[3] back at the head of the
  -- queue, oldest first out. May leave the queue over its bound: nothing is
  -- dropped. A stale list is dropped instead: its queue is gone.
  if not exists(BOUND) then return {'NOQUEUE'} end
  if ours(MARKS) and stale(redis.call('HGET', MARKS, ARGV[3]), now()) then
    return {'STALE', forget(ARGV[3])}
  end
  local n = 0
  while redis.call('LMOVE', KEYS[13], DATA, 'LEFT', 'RIGHT') do n = n + 1 end
  -- Empty now: unregistered, so stats and recovery stop visiting it.
  if ours(REG) then redis.call('SREM', REG, ARGV[3]) end
  if ours(MARKS) then redis.call('HDEL', MARKS, ARGV[3]) end
  local b = bound()
  if n > 0 and b > 0 and redis.call('LLEN', DATA) >= b then redis.call('DEL', NOTFULL) end
  return {'OK', n}

elseif op == 'length' then
  if not exists(BOUND) then return {'NOQUEUE'} end
  return {'OK', redis.call('LLEN', DATA)}

elseif op == 'exists' then
  return {'OK', redis.call('EXISTS', BOUND)}

elseif op == 'closed' then
  if not exists(BOUND) then return {'NOQUEUE'} end
  return {'OK', redis.call('EXISTS', CLOSED)}

elseif op == 'stats' then
  if not exists(BOUND) then return {'NOQUEUE'} end
  -- In flight: this queue's lists; stale: lists of an earlier queue.
  local v = now()
  local marks = {}
  local flat = ours(MARKS) and redis.call('HGETALL', MARKS) or {}
  for k = 1, #flat, 2 do marks[flat[k]] = flat[k + 1] end
  local live, old = 0, 0
  for _, c in ipairs(registered()) do
    local n = redis.call('LLEN', list_of(c))
    if stale(marks[c], v) then old = old + n else live = live + n end
  end
  local function num(k) return tonumber(redis.call('GET', k)) or 0 end
  return {'OK', bound(), redis.call('LLEN', DATA), redis.call('EXISTS', CLOSED),
          num(PMSG), num(PBYTES), num(CMSG), num(CBYTES),
          redis.call('GET', PRODUCER) or '', redis.call('GET', CONSUMER) or '',
          redis.call('LLEN', PFREE), redis.call('LLEN', CFREE),
          redis.call('LLEN', NOTFULL), live, old, ours(KEYS[13]) and num(KEYS[13]) or 0}

elseif op == 'peek' then
  -- ARGV[3], ARGV[4]: LRANGE's start and end, "-<skip+n>" and "-<skip+1>"
  -- (none: -1). The head of the queue, the next n messages a get would
  -- take after the first skip, oldest first. Takes no role, changes nothing.
  if not exists(BOUND) then return {'NOQUEUE'} end
  local items = redis.call('LRANGE', DATA, ARGV[3], ARGV[4] or -1)
  local reply = {'OK'}
  for k = #items, 1, -1 do reply[#reply + 1] = items[k] end
  return reply

elseif op == 'purge' then
  -- Drops every waiting message (reliable consumers' in-flight lists stay
  -- theirs), counted in KEYS[13], not in the protocol's consumed stats.
  -- The queue is below its bound now: the :not_full token is made sure of
  -- as the protocol's Get does when it leaves the queue below the bound, so
  -- producers waiting for room (any client's) wake. Takes no role: one
  -- atomic step, between any client's commands.
  if not exists(BOUND) then return {'NOQUEUE'} end
  local n = redis.call('LLEN', DATA)
  if n == 0 then return {'OK', 0} end
  if not ours(KEYS[13]) then return {'CLASH', KEYS[13]} end
  redis.call('DEL', DATA)
  redis.call('INCRBY', KEYS[13], n)
  if bound() > 0 then
    local nf = redis.call('LLEN', NOTFULL)
    if nf == 0 then redis.call('LPUSH', NOTFULL, '0')
    elseif nf > 1 then redis.call('LTRIM', NOTFULL, 0, 0) end
  end
  return {'OK', n}

elseif op == 'release' then
  -- ARGV[3]: 'producer' or 'consumer'. Gives back a role this client took in
  -- an earlier step, only if it still holds it. Works on a queue being
  -- deleted too: the deleter waits for the token.
  local free, holder = PFREE, PRODUCER
  if ARGV[3] == 'consumer' then free, holder = CFREE, CONSUMER end
  if redis.call('EXISTS', free) == 1 or redis.call('GET', holder) ~= mine then
    return {'NOTHELD'}
  end
  redis.call('LPUSH', free, '0')
  redis.call('SET', holder, id)
  return {'OK'}

elseif op == 'holder' then
  -- ARGV[3]: 'producer' or 'consumer'. Is the role free, and who holds it.
  local free, holder = PFREE, PRODUCER
  if ARGV[3] == 'consumer' then free, holder = CFREE, CONSUMER end
  return {'OK', redis.call('LLEN', free), redis.call('GET', holder) or ''}

elseif op == 'restore_token' then
  -- ARGV[3]: 'producer' or 'consumer'; ARGV[4]: the holder judged gone.
  -- Restores only if nothing changed since it looked, and records the
  -- restorer as holder, so that a second restorer that judged the same dead
  -- holder finds it changed (instead of pushing a second token after a new
  -- holder took the first).
  if not exists(BOUND) then return {'NOQUEUE'} end
  local free, holder = PFREE, PRODUCER
  if ARGV[3] == 'consumer' then free, holder = CFREE, CONSUMER end
  if redis.call('LLEN', free) ~= 0 or (redis.call('GET', holder) or '') ~= ARGV[4] then
    return {'CHANGED'}
  end
  redis.call('LPUSH', free, '0')
  redis.call('SET', holder, id)
  return {'OK'}

elseif op == 'tidy' then
  -- Trim duplicated tokens; restore :not_full when there is room and no role
  -- is held (so no client is between its pop and its refill).
  if not exists(BOUND) then return {'NOQUEUE'} end
  local done = {}
  for _, k in ipairs({PFREE, CFREE, NOTFULL}) do
    if redis.call('LLEN', k) > 1 then
      redis.call('LTRIM', k, 0, 0)
      done[#done + 1] = 'trimmed duplicated tokens in ' .. k
    end
  end
  local b = bound()
  if b > 0 and redis.call('LLEN', NOTFULL) == 0 and redis.call('LLEN', DATA) < b
     and redis.call('LLEN', PFREE) == 1 and redis.call('LLEN', CFREE) == 1 then
    redis.call('LPUSH', NOTFULL, '0')
    done[#done + 1] = 'restored ' .. NOTFULL .. ' (the queue has room)'
  end
  return {'OK', unpack(done)}
end

return redis.error_reply('sluice pressure script: unknown operation ' .. tostring(op))
