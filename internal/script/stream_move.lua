-- stream_move.lua: append an entry to a stream, then acknowledge the entry it was made
-- from. A stream's retry copy (destination = the source) and its dead letter
-- (destination = the dead-letter stream) are both this one step.
--
-- KEYS[1] -> the destination stream
-- KEYS[2] -> the source stream
-- ARGV[1] -> the consumer group of KEYS[2]
-- ARGV[2] -> the id of the entry of KEYS[2] to acknowledge
-- ARGV[3] -> bound of KEYS[1] as XADD MAXLEN ~ n; "0" for unbounded
-- ARGV[4] -> the consumer settling the entry: it must still own it
-- ARGV[5..] -> the new entry's field/value pairs, encoded by Go
--
-- Returns the new entry's id; an error reply "NOTOWNER …" when the entry is no longer
-- pending to ARGV[4] (another consumer claimed it, or it was settled): nothing is
-- written, so a consumer that stalled past min-idle never adds a second copy or dead
-- letter; or an error reply naming a key of the wrong type.
--
-- All or nothing: Redis does not roll back a script (nor a MULTI/EXEC) whose command
-- fails half-way, so every check comes before anything is written and the XADD comes
-- before the XACK: if the XADD fails, the script stops there, nothing is written and the
-- original stays pending. The XPENDING owner check also fails (WRONGTYPE) on a source
-- that is not a stream, so only a separate destination needs its own TYPE check: a retry
-- copy (destination = source) costs XPENDING, XADD, XACK.
if KEYS[1] ~= KEYS[2] then
  local kind = redis.call('TYPE', KEYS[1])['ok']
  if kind ~= 'stream' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a stream')
  end
end
if #redis.call('XPENDING', KEYS[2], ARGV[1], ARGV[2], ARGV[2], 1, ARGV[4]) == 0 then
  return redis.error_reply('NOTOWNER entry ' .. ARGV[2] .. ' is not pending to consumer ' .. ARGV[4])
end
local xadd = {'XADD', KEYS[1]}
if tonumber(ARGV[3]) > 0 then
  table.insert(xadd, 'MAXLEN')
  table.insert(xadd, '~')
  table.insert(xadd, ARGV[3])
end
table.insert(xadd, '*')
for i = 5, #ARGV do
  table.insert(xadd, ARGV[i])
end
local id = redis.call(unpack(xadd))
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
return id
