-- limit_release.lua: give back concurrency slots once their deliveries have run. A slot
-- is removed by its own token only, so a consumer whose lease ended (and whose slot was
-- given to another delivery) releases nothing of the other's.
--
-- KEYS[i] -> a concurrency limit's leases (a sorted set: token -> lease end in ms)
-- ARGV[i] -> the token slot i is held by
--
-- Returns how many of the slots were still held (and are now free).
--
-- Atomic: one ZREM per slot, all in one call.
local freed = 0
for i = 1, #KEYS do
  freed = freed + redis.call('ZREM', KEYS[i], ARGV[i])
end
return freed
