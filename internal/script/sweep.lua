-- sweep: move due members of a durable delay set back into their stream with new ids.
-- Atomic: a member is moved (XADD + ZREM) exactly once, however many consumers sweep
-- at the same time.
--
-- KEYS[1] -> the delay set (a sorted set scored by due time in ms)
-- KEYS[2] -> the stream
--
-- ARGV[1] -> "now" in ms (a test's fake clock); empty: the server's TIME
-- ARGV[2] -> the most members to move (a bounded batch: Go loops while a full one moved)
-- ARGV[3] -> the payload field's name, for members that do not parse
--
-- A member is "<entry id>\n" followed by "<length>:<bytes>" items, the entry's
-- field/value pairs (see internal/wire.DelayMember): only string operations here. A
-- member that does not parse is not lost: it is written back whole as the payload.
--
-- Returns {moved, next due time in ms or -1 when the set is empty, now in ms}.
--
-- All or nothing per member: the stream's type and the user's permissions for XADD and
-- ZREM (acl.lua) are checked before the first write; a member with more fields than a
-- script can write (tooMany: more than wire.MaxStreamFields pairs) is written
-- back whole as the payload, like one that does not parse, rather than fail every sweep;
-- a member's XADD runs under pcall and its ZREM only once the XADD succeeded, and an
-- XADD that fails all the same ends the sweep with its error (the members before it
-- moved, each whole).
--
-- Preludes: acl.lua, now.lua, next_due.lua; prepended by script.go.
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind ~= 'stream' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds a ' .. kind .. ', not a stream')
end
local denied = refusedAny({{'XADD', KEYS[2], '*', 'f', 'v'}, {'ZREM', KEYS[1], 'm'}})
if denied then
  return denied
end
local now = nowMs(ARGV[1])

local function fields(m)
  local nl = string.find(m, '\n', 1, true)
  if not nl then
    return nil
  end
  local args = {}
  local pos = nl + 1
  local size = string.len(m)
  while pos <= size do
    local colon = string.find(m, ':', pos, true)
    if not colon then
      return nil
    end
    local n = tonumber(string.sub(m, pos, colon - 1))
    if not n or n < 0 or colon + n > size then
      return nil
    end
    args[#args + 1] = string.sub(m, colon + 1, colon + n)
    pos = colon + n + 1
  end
  if #args == 0 or #args % 2 ~= 0 then
    return nil
  end
  return args
end

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(due) do
  local args = fields(m)
  if not args or tooMany(#args) then
    args = {ARGV[3], m}
  end
  local ok, r = pcall(function() return redis.pcall('XADD', KEYS[2], '*', unpack(args)) end)
  if not ok then
    return redis.error_reply('ERR xadd to ' .. KEYS[2] .. ': ' .. tostring(r))
  end
  if type(r) == 'table' and r['err'] then
    return r
  end
  redis.call('ZREM', KEYS[1], m)
end

return {#due, nextDue(KEYS[1]), now}
