-- limit_renew.lua: extend the leases of concurrency slots still held (the heartbeat of
-- running deliveries' slots), each only if it has not ended: a lease that ended may have
-- been given to another delivery, so it is lost, never taken back.
--
-- KEYS[i] -> a concurrency limit's leases (a sorted set: token -> lease end in ms)
-- ARGV[1] -> now in ms, or "" for the server's TIME
-- ARGV[2] -> the lease in ms
-- ARGV[2+i] -> the token slot i is held by
--
-- Returns the indexes i (1-based) of the slots lost: their lease had ended (removed, or
-- still there but past its end, then removed now).
--
-- Atomic: the check and the extension cannot be split by another process's take.
--
-- Preludes: now.lua; prepended by script.go.
local now = nowMs(ARGV[1])
local lease = tonumber(ARGV[2])
local lost = {}
for i = 1, #KEYS do
  local score = tonumber(redis.call('ZSCORE', KEYS[i], ARGV[2 + i]))
  if score and score > now then
    redis.call('ZADD', KEYS[i], 'XX', now + lease, ARGV[2 + i])
    local last = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', KEYS[i], math.max(tonumber(last[2]) - now, 1))
  else
    if score then
      redis.call('ZREM', KEYS[i], ARGV[2 + i])
    end
    lost[#lost + 1] = i
  end
end
return lost
