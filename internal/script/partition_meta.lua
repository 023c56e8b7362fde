-- partition_meta.lua: record, or read, how many partitions a partitioned stream has.
--
-- KEYS[1] -> the meta key: the partitioned stream's own name (a hash)
-- ARGV[1] -> the partitions the caller declares
-- ARGV[2] -> the hash the caller routes keys with (its name)
-- ARGV[3] -> "" to record only when absent; or the partitions now recorded, to replace
--            them with ARGV[1] if they still are (the caller checked that their layout
--            holds nothing)
--
-- Returns {partitions, hash} as recorded after the call; an error when the key holds
-- another type (a plain stream of the same name).
--
-- Atomic: two mounts starting at once record one layout; a replacement happens only over
-- the layout the caller checked.
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', not a partitioned stream\'s meta hash')
end
local n = redis.call('HGET', KEYS[1], 'partitions')
if not n then
  redis.call('HSET', KEYS[1], 'partitions', ARGV[1], 'hash', ARGV[2])
  return {ARGV[1], ARGV[2]}
end
if ARGV[3] ~= '' and n == ARGV[3] then
  redis.call('HSET', KEYS[1], 'partitions', ARGV[1], 'hash', ARGV[2])
  return {ARGV[1], ARGV[2]}
end
return {n, redis.call('HGET', KEYS[1], 'hash') or ''}
