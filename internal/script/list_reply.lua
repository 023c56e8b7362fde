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
-- not a list, or NOPERM when the user may not run the LREM or the RPUSH
-- (redis.acl_check_cmd, Redis 7), with nothing written.
--
-- Every check comes before the first write: both keys' types, at least one reply, the
-- user's permission for both writes. The
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
if redis.acl_check_cmd ~= nil then
  if not redis.acl_check_cmd('LREM', KEYS[1], '1', ARGV[1]) then
    return redis.error_reply('NOPERM this user has no permissions to run the lrem command on key ' .. KEYS[1])
  end
  if not redis.acl_check_cmd('RPUSH', KEYS[2], ARGV[2]) then
    return redis.error_reply('NOPERM this user has no permissions to run the rpush command on key ' .. KEYS[2])
  end
end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('RPUSH', KEYS[2], unpack(ARGV, 2))
return 1
