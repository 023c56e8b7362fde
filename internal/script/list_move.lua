-- list_move.lua: for each of a batch of items of a reliable list consumer's processing
-- list, take the item out and push a value to the tail of a list. A reliable list's
-- put-back (the value is the item itself, the destination the source list), its retry
-- copy (the value is the copy encoded by Go, retry count + 1) and its dead letter
-- (destination: the dead-letter list) are all this one step; a batch carries the moves
-- of many deliveries, to one or more destinations, in one call.
--
-- KEYS[1] -> the processing list
-- KEYS[2..] -> the destination lists
-- ARGV -> one move after another, three arguments each: the index in KEYS of its
--         destination (2 or more), the item to remove from KEYS[1] byte for byte, the
--         value to RPUSH to the destination
--
-- Returns one reply per move, in order: 1 when its item was taken and its value pushed;
-- 0 when its item was no longer in KEYS[1] (orphan recovery took it: nothing is written
-- for it); or an error reply naming its destination when that key is not a list or the
-- user may not RPUSH to it (nothing is written for it, its item stays). A processing
-- list that is not a list, or that the user may not LREM from, fails the whole call with
-- an error reply naming it, before anything is written.
--
-- All or nothing per move: every key's type and the user's permissions (acl.lua) are
-- checked once, before anything is written, and each move's value is pushed right after
-- its item was removed, and only if it was, so a settlement racing a recovery never
-- duplicates the item, and a batch of any size never holds items taken and not pushed
-- (one RPUSH of a whole batch's values would fail beyond Lua's ~8,000 values, after the
-- LREMs). An RPUSH to a list the script checked cannot fail.
--
-- Prelude: acl.lua; prepended by script.go.
local function listType(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'list' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' holds a ' .. kind .. ', not a list')
  end
  return nil
end

local wrong = listType(KEYS[1]) or refused('LREM', KEYS[1], '1', 'v')
if wrong then
  return wrong
end
local bad = {}
for k = 2, #KEYS do
  bad[k] = listType(KEYS[k]) or refused('RPUSH', KEYS[k], 'v')
end

local replies = {}
for i = 1, #ARGV, 3 do
  local k = tonumber(ARGV[i])
  local reply = bad[k]
  if not reply then
    reply = redis.call('LREM', KEYS[1], 1, ARGV[i + 1])
    if reply == 1 then
      redis.call('RPUSH', KEYS[k], ARGV[i + 2])
    end
  end
  replies[#replies + 1] = reply
end
return replies
