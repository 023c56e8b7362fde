-- stream_move.lua: for each of a batch of entries of one stream, append a new entry to a
-- destination stream, then acknowledge the entry it was made from. A stream's retry copy
-- (destination = the source) and its dead letter (destination = the dead-letter stream)
-- are both this one step; a batch carries the moves of many deliveries in one call.
--
-- KEYS[1] -> the destination stream
-- KEYS[2] -> the source stream
-- ARGV[1] -> the consumer group of KEYS[2]
-- ARGV[2] -> bound of KEYS[1] as XADD MAXLEN ~ n; "0" for unbounded
-- ARGV[3] -> the consumer settling the entries: it must still own each one
-- ARGV[4] -> the least entry id of the batch, ARGV[5] -> the greatest (only a hint: an
--            entry outside them is checked on its own)
-- ARGV[6..] -> one move after another, each: the id of the entry of KEYS[2] to
--              acknowledge, the count n of field/value arguments that follow, then the
--              new entry's n field/value arguments, encoded by Go
--
-- Returns one reply per move, in order: 1 once its entry is appended; or an error reply
-- "NOTOWNER …" when the entry is no longer pending to ARGV[3] (another consumer claimed
-- it, or it was settled, by an earlier move of the same batch too): nothing is written
-- for it, so a consumer that stalled past min-idle never adds a second copy or dead
-- letter; or the error reply of its XADD (nothing written, the entry stays pending).
-- A destination of the wrong type, or a source that is not a stream with that group,
-- fails the whole call with an error reply, before anything is written.
--
-- The owner check: one XPENDING lists the entries of ARGV[4]..ARGV[5] pending to
-- ARGV[3] (bounded, so a long pending list costs no more than a few per move); an entry
-- it lists is owned, one it does not list is checked by an XPENDING of its own.
--
-- All or nothing per move: Redis does not roll back a script (nor a MULTI/EXEC) whose
-- command fails half-way, so everything that can fail is checked before the first
-- write: the keys' types, the user's permissions for XADD and XACK on them
-- (acl.lua), each move's size (tooMany: at most wire.MaxStreamFields pairs: Lua hands one
-- call no more than about 8,000 values, so a larger entry cannot be written from a
-- script at all; its reply is "TOOMANY …" and nothing is written for it) and its
-- ownership. Then each move is written: its XADD runs under pcall (a failure is that
-- move's reply, nothing written, and the script goes on). The entries whose copies were
-- written are acknowledged last, together, in one XACK (in pieces of 4,000 ids, what Lua
-- can unpack, for a batch that large): the script is atomic as a whole, and that XACK
-- cannot fail once XPENDING found the group on the same key and the ACL check let it
-- through; should a piece fail all the same, its new entries are deleted again (XDEL,
-- best effort) and each of its moves answers the error, so no move is left half done. A
-- batch of retry copies (destination = source) costs one XPENDING, one XADD per move and
-- one XACK.
--
-- Prelude: acl.lua; prepended by script.go.
if KEYS[1] ~= KEYS[2] then
  local kind = redis.call('TYPE', KEYS[1])['ok']
  if kind ~= 'stream' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a stream')
  end
end
local group, consumer = ARGV[1], ARGV[3]
local bounded = tonumber(ARGV[2]) > 0
local denied = refusedAny({{'XADD', KEYS[1], '*', 'f', 'v'}, {'XACK', KEYS[2], group, '0-1'}})
if denied then
  return denied
end

local nargs = #ARGV
local moves, i = 0, 6
while i <= nargs do
  moves = moves + 1
  i = i + 2 + tonumber(ARGV[i + 1])
end
local owned = {} -- id -> true: pending to the consumer; false: moved by this batch
for _, p in ipairs(redis.call('XPENDING', KEYS[2], group, ARGV[4], ARGV[5], 2 * moves + 32, consumer)) do
  owned[p[1]] = true
end

local replies, acks, added, at, k = {}, {}, {}, {}, 0 -- acks[k]: written as added[k], answered in replies[at[k]]
i = 6
for m = 1, moves do
  local id, n = ARGV[i], tonumber(ARGV[i + 1])
  local first, last = i + 2, i + 1 + n
  i = last + 1
  local mine = owned[id]
  if mine == nil then -- outside the range's answer: checked on its own
    local pending = redis.pcall('XPENDING', KEYS[2], group, id, id, 1, consumer)
    if pending['err'] then
      mine = pending
    else
      mine = #pending > 0
    end
  end
  local reply
  if n > 4000 then
    reply = redis.error_reply(tooMany(n)['err'] .. ' (entry ' .. id .. ')')
  elseif mine == true then
    if bounded then -- n is within what unpack takes, so nothing here raises
      reply = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, first, last))
    else
      reply = redis.pcall('XADD', KEYS[1], '*', unpack(ARGV, first, last))
    end
    if type(reply) == 'string' then -- the new entry's id: its original is acknowledged below
      owned[id] = false
      k = k + 1
      acks[k], added[k], at[k] = id, reply, m
      reply = 1
    end
  elseif mine == false then
    reply = redis.error_reply('NOTOWNER entry ' .. id .. ' is not pending to consumer ' .. consumer)
  else
    reply = mine
  end
  replies[m] = reply
end

-- The acknowledgements, in pieces of 4,000 ids; a piece that fails takes back its copies.
for first = 1, k, 4000 do
  local last = math.min(first + 3999, k)
  local acked = redis.pcall('XACK', KEYS[2], group, unpack(acks, first, last))
  if type(acked) == 'table' and acked['err'] then
    redis.pcall('XDEL', KEYS[1], unpack(added, first, last))
    for j = first, last do
      replies[at[j]] = acked
    end
  end
end
return replies
