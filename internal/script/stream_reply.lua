-- stream_reply.lua: append a delivery's replies to the reply stream and acknowledge the
-- entry they answer, in one step: either every reply is written and the entry
-- acknowledged, or nothing is written and the entry stays pending.
--
-- KEYS[1] -> the reply stream (same hash slot as KEYS[2])
-- KEYS[2] -> the source stream
-- ARGV[1] -> the consumer group of KEYS[2]
-- ARGV[2] -> the consumer settling the entry: it must still own it
-- ARGV[3] -> the id of the entry of KEYS[2] to acknowledge
-- KEYS[3] -> (settle.Dedupe only) the mark set, in KEYS[2]'s slot (dedup.lua)
-- ARGV[4..] -> one reply after another, each: the count n of field/value arguments that
--              follow, then the reply entry's n field/value arguments, encoded by Go.
--              With KEYS[3], ARGV[4..6] are first: "now" in ms (empty: the server's
--              TIME), the window in ms and the entry's dedup key, marked completed
--              with the acknowledgement.
--
-- Returns 1 once the replies are appended and the entry acknowledged; or an error reply,
-- with nothing written: "NOTOWNER …" when the entry is no longer pending to ARGV[2]
-- (another consumer claimed it, or it was settled), so a consumer that stalled past
-- min-idle never adds a second reply; WRONGTYPE when KEYS[1] is not a stream; BADREPLY
-- when a reply's arguments are malformed; NOPERM when the user may not run the XADD or
-- the XACK (refusedAny, the acl.lua prelude); TOOMANY when a reply has more fields than
-- one XADD from a script takes (tooMany).
--
-- Every check comes before the first write: the reply stream's type, the owner, each
-- reply's shape and size, the user's permission for both writes. Then the XADDs (to a stream or a missing key, with an even, non-empty
-- list of field/values: they cannot fail) and the XACK (the group and the entry were
-- found by XPENDING on the same key) run with nothing left that can raise.
--
-- Preludes: acl.lua, now.lua, expiry.lua, dedup.lua; prepended by script.go.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'stream' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a stream')
end
local group, consumer, id = ARGV[1], ARGV[2], ARGV[3]
local pending = redis.call('XPENDING', KEYS[2], group, id, id, 1, consumer)
if #pending == 0 then
  return redis.error_reply('NOTOWNER entry ' .. id .. ' is not pending to consumer ' .. consumer)
end
local replies = {}
local i = 4
if KEYS[3] then
  i = 7
end
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  if n == nil or n < 2 or n % 2 ~= 0 or i + n > #ARGV then
    return redis.error_reply('BADREPLY reply at argument ' .. i .. ' has a malformed field count')
  end
  replies[#replies + 1] = {i + 1, i + n}
  i = i + n + 1
end
for _, r in ipairs(replies) do
  local big = tooMany(r[2] - r[1] + 1)
  if big then
    return big
  end
end
local denied = refusedAny({{'XADD', KEYS[1], '*', 'f', 'v'}, {'XACK', KEYS[2], group, id}})
if KEYS[3] then
  denied = denied or refusedMarks(KEYS[3], tonumber(ARGV[5]))
end
if denied then
  return denied
end
for _, r in ipairs(replies) do
  redis.call('XADD', KEYS[1], '*', unpack(ARGV, r[1], r[2]))
end
redis.call('XACK', KEYS[2], group, id)
if KEYS[3] then
  markDone(KEYS[3], nowMs(ARGV[4]), tonumber(ARGV[5]), {ARGV[6]})
end
return 1
