-- list_move.lua: take one item out of a reliable list consumer's processing list and
-- push a value to the tail of a list. A reliable list's put-back (the value is the item
-- itself, the destination the source list), its retry copy (the value is the copy
-- encoded by Go, retry count + 1) and its dead letter (destination: the dead-letter
-- list) are all this one step.
--
-- KEYS[1] -> the processing list
-- KEYS[2] -> the destination list
-- ARGV[1] -> the item to remove from KEYS[1], byte for byte
-- ARGV[2] -> the value to RPUSH to KEYS[2]
--
-- Returns 1 when the item was moved, 0 when it was no longer in KEYS[1] (orphan recovery
-- took it: nothing is written), or an error reply naming a key of the wrong type.
--
-- All or nothing: the key types are checked before anything is written, and the push
-- happens only if the item was removed, so a settlement racing a recovery never
-- duplicates the item.
for i = 1, 2 do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind ~= 'list' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[i] .. ' holds a ' .. kind .. ', not a list')
  end
end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
