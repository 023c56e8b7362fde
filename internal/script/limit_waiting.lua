-- limit_waiting.lua: record how many deliveries one process has waiting for a mount's
-- flow limits, for operators (settle/admin reads it), and forget what processes that
-- stopped reporting (crashed) recorded.
--
-- KEYS[1] -> the mount's waiting counts (a hash: process -> "<expires ms>:<n1>,<n2>,…",
--            one count per limit in the order declared)
-- ARGV[1] -> now in ms, or "" for the server's TIME
-- ARGV[2] -> the process's field
-- ARGV[3] -> its counts ("n1,n2,…"), or "" to remove its field (nothing waits)
-- ARGV[4] -> how long its counts hold without another report, in ms
--
-- Returns the number of processes whose counts are held now.
--
-- Atomic: the write and the sweep of expired fields are one step. The hash holds one field
-- per live process, so the sweep reads a few fields; the hash expires once no process has
-- reported within ARGV[4].
--
-- Preludes: now.lua; prepended by script.go.
local now = nowMs(ARGV[1])
local ttl = tonumber(ARGV[4])
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[2])
else
  redis.call('HSET', KEYS[1], ARGV[2], string.format('%d', now + ttl) .. ':' .. ARGV[3])
end
local all = redis.call('HGETALL', KEYS[1])
local live = 0
for i = 1, #all, 2 do
  local expires = tonumber(string.match(all[i + 1], '^(%d+):'))
  if not expires or expires <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    live = live + 1
  end
end
if live > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return live
