-- acl.lua: the checks every settlement script makes before its first write (the user's
-- permissions, the keys' types, the sizes of what it writes); it is prepended to each
-- when the script is loaded (see script.go).

-- refused(command, key, ...) returns nil when the user running the script may run the
-- command with these arguments, else a NOPERM error reply naming the command and the key.
-- Redis Lua does not undo a script's writes when a later command fails, so a script
-- asks this of every write it may make before it makes the first. The answer comes from
-- redis.acl_check_cmd (Redis 7 and Valkey); a server without it (miniredis, Redis 6)
-- lets every command through, and its own refusal, if any, comes at the call.
local function refused(...)
  if redis.acl_check_cmd == nil or redis.acl_check_cmd(...) then
    return nil
  end
  local cmd, key = ...
  return redis.error_reply('NOPERM this user has no permissions to run the ' .. string.lower(cmd) ..
    ' command on key ' .. tostring(key))
end

-- refusedAny returns the first refusal of a list of {command, key, ...} checks, or nil.
local function refusedAny(checks)
  for _, c in ipairs(checks) do
    local r = refused(unpack(c))
    if r then
      return r
    end
  end
  return nil
end

-- refusedPark(set, ttl, checks) is refusedAny of checks and of a park's own commands on
-- the delay set: ZADD, and what keepFor (expiry.lua) may run: PTTL and PEXPIRE when ttl
-- (ms) is positive, else PERSIST.
local function refusedPark(set, ttl, checks)
  checks[#checks + 1] = {'ZADD', set, '0', 'm'}
  if tonumber(ttl) > 0 then
    checks[#checks + 1] = {'PTTL', set}
    checks[#checks + 1] = {'PEXPIRE', set, ttl}
  else
    checks[#checks + 1] = {'PERSIST', set}
  end
  return refusedAny(checks)
end

-- tooMany(n) returns a TOOMANY error reply when n field/value arguments are more than one
-- XADD from a script can take (wire.MaxStreamFields pairs), else nil.
local function tooMany(n)
  if n > 4000 then
    return redis.error_reply('TOOMANY an entry of ' .. (n / 2) .. ' fields is more than the 2000 a script can write')
  end
  return nil
end

-- wrongType(key, want) returns a WRONGTYPE error reply naming key when it holds another
-- type than want (a missing key is of every type), else nil.
local function wrongType(key, want)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= want and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' holds a ' .. kind .. ', not a ' .. want)
  end
  return nil
end
