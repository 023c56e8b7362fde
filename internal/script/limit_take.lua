-- limit_take.lua: let one delivery start under every flow limit of its mount, or tell
-- how long it must wait: all of its limits are checked first and, only if every one
-- admits it, all are taken, so a refused delivery takes nothing.
--
-- KEYS[i] -> limit i's state: a rate limit's theoretical arrival time (a string, in µs),
--            or a concurrency limit's leases (a sorted set: token -> lease end in ms)
-- ARGV[1] -> now in ms, or "" for the server's TIME
-- ARGV[2] -> the token the delivery holds its concurrency slots by (unique per start)
-- ARGV[2+4(i-1)+1..4] -> limit i: "rate", its emission interval in µs, its tolerance in
--            µs (the burst less one, times the interval), unused; or "slots", its slot
--            count, the lease in ms, unused
--
-- Returns 0 when the delivery may start (its rate limits' arrival times moved on, its
-- slots leased to ARGV[2]), else {wait in ms, i}: the longest wait any limit asks and
-- the limit that asks it (a concurrency limit's wait is when its earliest lease ends,
-- an upper bound: a release frees a slot sooner).
--
-- Rate limits are GCRA: a key stores one number, and it expires once its arrival time
-- has passed, so an idle key costs nothing. Leases expire on their own: an expired one
-- is removed before a slot is counted, and the set expires when its last lease would.
--
-- Atomic: the check and the take cannot be split by another process's take.
--
-- Preludes: now.lua; prepended by script.go.
local now = nowMs(ARGV[1])
local nowUs = now * 1000
local wait, which = 0, 0
local tats = {}
for i = 1, #KEYS do
  local kind = ARGV[2 + 4 * (i - 1) + 1]
  local a = tonumber(ARGV[2 + 4 * (i - 1) + 2])
  local b = tonumber(ARGV[2 + 4 * (i - 1) + 3])
  local w = 0
  if kind == 'rate' then
    local tat = tonumber(redis.call('GET', KEYS[i])) or nowUs
    if tat < nowUs then
      tat = nowUs
    end
    if tat - nowUs > b then
      w = math.ceil((tat - nowUs - b) / 1000)
    end
    tats[i] = tat + a
  else
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    if redis.call('ZCARD', KEYS[i]) >= a then
      local first = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
      w = math.max(tonumber(first[2]) - now, 1)
    end
  end
  if w > wait then
    wait, which = w, i
  end
end
if which > 0 then
  return {wait, which}
end
for i = 1, #KEYS do
  if tats[i] then
    redis.call('SET', KEYS[i], string.format('%d', tats[i]), 'PX', math.ceil((tats[i] - nowUs) / 1000) + 1)
  else
    local lease = tonumber(ARGV[2 + 4 * (i - 1) + 3])
    redis.call('ZADD', KEYS[i], now + lease, ARGV[2])
    local last = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', KEYS[i], math.max(tonumber(last[2]) - now, 1))
  end
end
return 0
