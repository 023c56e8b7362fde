-- expiry.lua: a delay set's expiry, shared by every script that parks a member in one; it
-- is prepended to each when the script is loaded (see script.go).

-- keepFor(key, existed, ttl) makes the delay set key live at least ttl ms from now (ttl
-- 0: for ever) without shortening the life another writer gave it: the set's expiry
-- becomes the later of the two, no expiry counting as the latest. Writers of one set may
-- give it different TTLs (a mount's park, a producer's delayed publish), and each member
-- must outlive what its own writer asked; so a shorter TTL never brings the expiry
-- closer, a set without expiry keeps none, and a writer without TTL removes the
-- expiry. existed says whether the key existed before this script's ZADD (a key the ZADD
-- made has no expiry yet).
local function keepFor(key, existed, ttl)
  if ttl <= 0 then
    if existed then
      redis.call('PERSIST', key)
    end
    return
  end
  if existed then
    local left = redis.call('PTTL', key)
    if left < 0 or left >= ttl then
      return -- no expiry, or a later one
    end
  end
  redis.call('PEXPIRE', key, ttl)
end
