-- key_type.lua: the type check the scripts that write into keys of a given type share;
-- it is prepended to each when the script is loaded (see script.go).

-- checkType returns an error reply naming key when it holds a type other than want (a
-- missing key passes), else nil: the caller returns it before writing anything.
local function checkType(key, want)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= want and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' holds a ' .. kind .. ', not a ' .. want)
  end
  return nil
end
