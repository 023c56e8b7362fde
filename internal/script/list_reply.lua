-- list_reply.lua: take an item out of a reliable list consumer's processing list and
-- push the delivery's replies to the tail of the reply list, in one step: either the
-- item is taken and every reply pushed, or nothing is written.
--
-- KEYS[1] -> the processing list
-- KEYS[2] -> the reply list (same hash slot)
-- ARGV[1] -> the item to remove from KEYS[1], byte for byte
-- ARGV[2..] -> the replies, each a value encoded by Go, pushed in order
--
-- Returns 1 when the item was taken and the replies pushed; 0 when the item was no
-- longer in KEYS[1] (orphan recovery took it: nothing is written, so a consumer whose
-- heartbeat lapsed never adds a second reply); or an error reply naming the key that is
-- not a list, with nothing written.
--
-- Every check comes before the first write: both keys' types, at least one reply. The
-- LREM then decides; the RPUSH that follows cannot fail on a list the script checked.
for _, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'list' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' holds a ' .. kind .. ', not a list')
  end
end
if #ARGV < 2 then
  return redis.error_reply('BADREPLY no reply to push')
end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('RPUSH', KEYS[2], unpack(ARGV, 2))
return 1
