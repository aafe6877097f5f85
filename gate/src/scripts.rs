//! The Lua scripts that own every change to the shared quota. Each runs atomically in
//! Redis, so a pass issue and a recompute never interleave.

use std::sync::LazyLock;

use redis::Script;

/// KEYS: quota, holders. ARGV: member, now, expiry (unix seconds).
/// Returns `{1, exp, -1}` the member's live pass, `{2, exp, remaining}` a new pass,
/// `{0, 0, quota}` no quota, `{3, 0, 0}` no quota key (not a sold-out answer).
pub static ISSUE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local held = redis.call('ZSCORE', KEYS[2], ARGV[1])
if held and tonumber(held) > tonumber(ARGV[2]) then
  return {1, tonumber(held), -1}
end
local q = redis.call('GET', KEYS[1])
if not q then
  return {3, 0, 0}
end
q = tonumber(q)
if q <= 0 then
  return {0, 0, q}
end
q = redis.call('DECR', KEYS[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return {2, tonumber(ARGV[3]), q}
"#,
    )
});

/// [`ISSUE`] for many members at once, in order. KEYS: quota, holders. ARGV: now,
/// expiry, member... Returns the three numbers of [`ISSUE`] per member, flattened.
pub static ISSUE_MANY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local now = tonumber(ARGV[1])
local exp = tonumber(ARGV[2])
local q = redis.call('GET', KEYS[1])
if q then q = tonumber(q) end
local issued = 0
local out = {}
for i = 3, #ARGV do
  local held = redis.call('ZSCORE', KEYS[2], ARGV[i])
  if held and tonumber(held) > now then
    out[#out + 1] = 1; out[#out + 1] = tonumber(held); out[#out + 1] = -1
  elseif not q then
    out[#out + 1] = 3; out[#out + 1] = 0; out[#out + 1] = 0
  elseif q <= 0 then
    out[#out + 1] = 0; out[#out + 1] = 0; out[#out + 1] = q
  else
    q = q - 1
    issued = issued + 1
    redis.call('ZADD', KEYS[2], exp, ARGV[i])
    out[#out + 1] = 2; out[#out + 1] = exp; out[#out + 1] = q
  end
end
if issued > 0 then redis.call('DECRBY', KEYS[1], issued) end
return out
"#,
    )
});

/// KEYS: quota, holders, used. ARGV: available (from the order service, read after the
/// used passes were asked for and before this runs), cutoff (passes expiring before it
/// can no longer be used and are dropped), now, the number N of used members, N members
/// whose current pass the order service reports as used, then pairs of member, expiry
/// for passes this instance issued that Redis may not know (issued without Redis, or
/// lost with it).
/// Sets quota = max(0, available - unused passes in flight) and returns
/// `{old quota or -1 when absent, new quota, in flight, live holders if new is 0}`.
pub static RECOMPUTE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[2])
local nused = tonumber(ARGV[4])
for i = 5, 4 + nused do
  local s = redis.call('ZSCORE', KEYS[2], ARGV[i])
  if s then redis.call('ZADD', KEYS[3], s, ARGV[i]) end
end
for i = 5 + nused, #ARGV, 2 do
  if tonumber(ARGV[i + 1]) >= tonumber(ARGV[2]) then
    redis.call('ZADD', KEYS[2], 'GT', ARGV[i + 1], ARGV[i])
  end
end
-- A used mark counts only while it names the member's current pass.
local used = 0
local marks = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
for j = 1, #marks, 2 do
  local s = redis.call('ZSCORE', KEYS[2], marks[j])
  if s and tonumber(s) == tonumber(marks[j + 1]) then
    used = used + 1
  else
    redis.call('ZREM', KEYS[3], marks[j])
  end
end
local inflight = redis.call('ZCARD', KEYS[2]) - used
local old = redis.call('GET', KEYS[1])
local new = tonumber(ARGV[1]) - inflight
if new < 0 then new = 0 end
redis.call('SET', KEYS[1], new)
local live = {}
if new == 0 then
  live = redis.call('ZRANGE', KEYS[2], '(' .. ARGV[3], '+inf', 'BYSCORE', 'WITHSCORES')
end
if old then old = tonumber(old) else old = -1 end
return {old, new, inflight, live}
"#,
    )
});

/// KEYS: holders. ARGV: cutoff. Returns the live `{member, expiry, ...}` pairs, whose
/// pass ids the recompute asks the order service about.
pub static HOLDERS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
return redis.call('ZRANGE', KEYS[1], ARGV[1], '+inf', 'BYSCORE', 'WITHSCORES')
"#,
    )
});

/// KEYS: quota, holders. ARGV: now. Returns `{quota or -1, live holders if quota is 0}`,
/// read together so a sold-out mark never misses a pass issued before it.
pub static SNAPSHOT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local q = redis.call('GET', KEYS[1])
if not q then return {-1, {}} end
q = tonumber(q)
if q > 0 then return {q, {}} end
return {q, redis.call('ZRANGE', KEYS[2], '(' .. ARGV[1], '+inf', 'BYSCORE', 'WITHSCORES')}
"#,
    )
});

/// KEYS: quota, holders, used. ARGV: now. Returns `{quota or -1, live passes not yet
/// known to be used}`.
pub static READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local q = redis.call('GET', KEYS[1])
if not q then return {-1, 0} end
local live = redis.call('ZCOUNT', KEYS[2], '(' .. ARGV[1], '+inf')
local marks = redis.call('ZRANGE', KEYS[3], '(' .. ARGV[1], '+inf', 'BYSCORE', 'WITHSCORES')
for j = 1, #marks, 2 do
  local s = redis.call('ZSCORE', KEYS[2], marks[j])
  if s and tonumber(s) == tonumber(marks[j + 1]) then live = live - 1 end
end
return {tonumber(q), live}
"#,
    )
});
