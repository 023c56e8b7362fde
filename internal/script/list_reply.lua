-- list_reply.lua: take an item out of a reliable list consumer's processing list and
-- push the delivery's replies to the tail of the reply list, in one step: either the
-- item is taken and every reply pushed, or nothing is written.
--
-- KEYS[1] -> the processing list
-- KEYS[2] -> the reply list (same hash slot)
-- ARGV[1] -> the item to remove from KEYS[1], byte for byte
-- KEYS[3] -> (settle.Dedupe only) the mark set, in KEYS[1]'s slot (dedup.lua)
-- ARGV[2..] -> the replies, each a value encoded by Go, pushed in order. With KEYS[3],
--              ARGV[2..4] are first: "now" in ms (empty: the server's TIME), the window
--              in ms and the item's dedup key, marked completed with the item's removal.
--
-- Returns 1 when the item was taken and the replies pushed; 0 when the item was no
-- longer in KEYS[1] (orphan recovery took it: nothing is written, so a consumer whose
-- heartbeat lapsed never adds a second reply); or an error reply naming the key that is
-- not a list, or NOPERM when the user may not run the LREM or the RPUSH
-- (refusedAny, the acl.lua prelude), with nothing written.
--
-- Every check comes before the first write: both keys' types, at least one reply, the
-- user's permission for both writes. The
-- LREM then decides; the RPUSH that follows cannot fail on a list the script checked.
--
-- Preludes: acl.lua, now.lua, expiry.lua, dedup.lua; prepended by script.go.
for k = 1, 2 do
  local key = KEYS[k]
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'list' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' holds a ' .. kind .. ', not a list')
  end
end
local first = 2
if KEYS[3] then
  first = 5
end
if #ARGV < first then
  return redis.error_reply('BADREPLY no reply to push')
end
local denied = refusedAny({{'LREM', KEYS[1], '1', ARGV[1]}, {'RPUSH', KEYS[2], ARGV[first]}})
if KEYS[3] then
  denied = denied or refusedMarks(KEYS[3], tonumber(ARGV[3]))
end
if denied then
  return denied
end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
-- In chunks: one call takes fewer values than Lua can unpack (about 8,000), and an RPUSH
-- to a list the script checked cannot fail.
for i = first, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if KEYS[3] then
  markDone(KEYS[3], nowMs(ARGV[2]), tonumber(ARGV[3]), {ARGV[4]})
end
return 1
