-- perms.lua: which of a list of commands the user running the script may not run, asked
-- of redis.acl_check_cmd (Redis 7 and Valkey) before a mount starts. It writes nothing.
--
-- ARGV -> one command after another, each: the count n of arguments that follow, then
--         the command's name and its arguments (its keys where the ACL matches them)
--
-- Returns the 1-based positions of the commands refused, or -1 when the server has no
-- redis.acl_check_cmd (it cannot tell: miniredis, Redis 6).
if redis.acl_check_cmd == nil then
  return -1
end
local refused = {}
local i, k = 1, 0
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  k = k + 1
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(ARGV, i + 1, i + n))
  if not ok or not allowed then
    refused[#refused + 1] = k
  end
  i = i + 1 + n
end
return refused
