// The Lua scripts redis_store runs, one per operation, each atomic on the server, and the names
// its calls pick them by. The record's layout and the keys they touch are described in
// idem/store/redis/keys.hpp.
#ifndef IDEM_STORE_REDIS_DETAIL_SCRIPTS_HPP
#define IDEM_STORE_REDIS_DETAIL_SCRIPTS_HPP

#include <cstddef>
#include <cstdint>

namespace idem::detail {

// The scripts. Times travel as decimal nanoseconds since the epoch and are split into seconds
// and nanoseconds inside Lua, whose numbers are doubles: exact to the nanosecond, where one
// double of nanoseconds would be off by hundreds. Index scores are microseconds (exact as
// doubles); sweep and stuck re-check every candidate against the exact time in the record.
// An empty `now` argument means "the server's TIME".
//
// Under maxmemory with noeviction, Redis refuses a script's first write that could grow memory
// (and only the first: a script is never stopped halfway). Each script's first write is such a
// command (HSET), so a refused one changed nothing; release only deletes, so it always works.
#define IDEM_REDIS_LUA_PRELUDE                                                        \
  "local function split(t)\n"                                                         \
  "  local n = #t\n"                                                                  \
  "  if n <= 9 then return 0, tonumber(t) end\n"                                      \
  "  return tonumber(string.sub(t, 1, n - 9)), tonumber(string.sub(t, n - 8))\n"      \
  "end\n"                                                                             \
  "local function join(s, ns)\n"                                                      \
  "  if s == 0 then return string.format('%d', ns) end\n"                             \
  "  return string.format('%d%09d', s, ns)\n"                                         \
  "end\n"                                                                             \
  "local function clock(given)\n"                                                     \
  "  if given ~= '' then return split(given) end\n"                                   \
  "  local t = redis.call('TIME')\n"                                                  \
  "  return tonumber(t[1]), tonumber(t[2]) * 1000\n"                                  \
  "end\n"                                                                             \
  "local function later(s, ns, ds, dns)\n"                                            \
  "  s, ns = s + ds, ns + dns\n"                                                      \
  "  if ns >= 1000000000 then return s + 1, ns - 1000000000 end\n"                    \
  "  return s, ns\n"                                                                  \
  "end\n"                                                                             \
  "local function reached(ts, tns, s, ns)\n"                                          \
  "  return ts < s or (ts == s and tns <= ns)\n"                                      \
  "end\n"                                                                             \
  "local function micros(s, ns) return s * 1000000 + math.floor(ns / 1000) end\n"     \
  "local function ttl(ds, dns, extra) return ds * 1000 + math.ceil(dns / 1000000) + " \
  "extra end\n"                                                                       \
  "local function keep_index(key, ms)\n"                                              \
  "  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end\n"       \
  "end\n"

struct redis_scripts {
  // KEYS: record, expiry index, lease index. ARGV: now, lease ns, retention ns, fingerprint,
  // key, extra TTL ms, the scope's record cap ('' for none), recovery bytes. Answers {0, fence}
  // claimed, {1, fence, f, c, l, e, r} taken over, {2, n, s, f, c, l, e, v, r} existing, {3, 0}
  // the scope is at its cap. The cap counts the scope's expiry index past now's microsecond (a
  // record that expires within that microsecond is not counted). A record the claim creates
  // (new, or replacing an expired or released one) starts with the given recovery bytes, in the
  // one HSET that is the script's first write, so a server out of memory refuses them with the
  // record; none given, the record has no 'r' field, as it never had. A takeover keeps 'r'.
  static constexpr const char* claim = IDEM_REDIS_LUA_PRELUDE
      "local s, ns = clock(ARGV[1])\n"
      "local held = redis.call('HMGET', KEYS[1], 'n', 's', 'f', 'c', 'l', 'e', 'v', 'r')\n"
      "local fence = 0\n"
      "if held[1] then\n"
      "  local es, ens = split(held[6])\n"
      "  if held[2] and not reached(es, ens, s, ns) then\n"
      "    if held[2] == 'p' and held[3] == ARGV[4] then\n"
      "      local ls, lns = split(held[5])\n"
      "      if reached(ls, lns, s, ns) then\n"
      "        local next = tonumber(held[1]) + 1\n"
      "        local us, uns = later(s, ns, split(ARGV[2]))\n"
      "        local lease = join(us, uns)\n"
      "        redis.call('HSET', KEYS[1], 'n', next, 'l', lease)\n"
      "        redis.call('ZADD', KEYS[3], micros(us, uns), ARGV[5])\n"
      "        return {1, next, held[3], held[4], lease, held[6], held[8] or ''}\n"
      "      end\n"
      "    end\n"
      "    return {2, held[1], held[2], held[3], held[4], held[5], held[6], held[7] or '',\n"
      "            held[8] or ''}\n"
      "  end\n"
      "  fence = tonumber(held[1])\n"
      "end\n"
      "if ARGV[7] ~= '' then\n"
      "  local live = redis.call('ZCOUNT', KEYS[2], '(' .. micros(s, ns), '+inf')\n"
      "  if held[1] and held[6] then\n"
      "    local es, ens = split(held[6])\n"
      "    if not reached(es, ens, s, ns) then live = live - 1 end\n"
      "  end\n"
      "  if live >= tonumber(ARGV[7]) then return {3, 0} end\n"
      "end\n"
      "fence = fence + 1\n"
      "local ls, lns = later(s, ns, split(ARGV[2]))\n"
      "local rs, rns = split(ARGV[3])\n"
      "local es, ens = later(s, ns, rs, rns)\n"
      "local fields = {'n', fence, 's', 'p', 'f', ARGV[4], 'c', join(s, ns), 'l', join(ls, lns),\n"
      "                'e', join(es, ens)}\n"
      "if ARGV[8] ~= '' then fields[13], fields[14] = 'r', ARGV[8] end\n"
      "redis.call('HSET', KEYS[1], unpack(fields))\n"
      "if held[7] then redis.call('HDEL', KEYS[1], 'v') end\n"
      "if held[8] and ARGV[8] == '' then redis.call('HDEL', KEYS[1], 'r') end\n"
      "local ms = ttl(rs, rns, tonumber(ARGV[6]))\n"
      "redis.call('PEXPIRE', KEYS[1], ms)\n"
      "redis.call('ZADD', KEYS[2], micros(es, ens), ARGV[5])\n"
      "redis.call('ZADD', KEYS[3], micros(ls, lns), ARGV[5])\n"
      "keep_index(KEYS[2], ms)\n"
      "keep_index(KEYS[3], ms)\n"
      "return {0, fence}\n";

  // KEYS: the scope registry. ARGV: the scope's tag. Runs right after claim on the same
  // connection; allowed when the server is out of memory, so a record the claim did write is
  // never left out of the registry.
  static constexpr const char* enroll =
      "#!lua flags=allow-oom\n"
      "return redis.call('SADD', KEYS[1], ARGV[1])\n";

  // KEYS: record, lease index. ARGV: fence, response, key.
  static constexpr const char* complete =
      "local held = redis.call('HMGET', KEYS[1], 'n', 's')\n"
      "if held[1] ~= ARGV[1] or not held[2] then return 0 end\n"
      "redis.call('HSET', KEYS[1], 's', 'c', 'v', ARGV[2])\n"
      "redis.call('HDEL', KEYS[1], 'r')\n"
      "redis.call('ZREM', KEYS[2], ARGV[3])\n"
      "return 1\n";

  // KEYS: record, lease index. ARGV: fence, key. The record stays, without state, response and
  // recovery: a tombstone that keeps the fence (and its TTL) until the record expires.
  static constexpr const char* release =
      "local held = redis.call('HMGET', KEYS[1], 'n', 's')\n"
      "if held[1] ~= ARGV[1] or not held[2] then return 0 end\n"
      "redis.call('HDEL', KEYS[1], 's', 'v', 'r')\n"
      "redis.call('ZREM', KEYS[2], ARGV[2])\n"
      "return 1\n";

  // KEYS: record, lease index. ARGV: fence, recovery, lease_until ('' = server time plus ARGV[4]
  // nanoseconds), extension ns, key.
  static constexpr const char* checkpoint = IDEM_REDIS_LUA_PRELUDE
      "local held = redis.call('HMGET', KEYS[1], 'n', 's')\n"
      "if held[1] ~= ARGV[1] or not held[2] then return 0 end\n"
      "local ls, lns\n"
      "if ARGV[3] ~= '' then ls, lns = split(ARGV[3])\n"
      "else\n"
      "  local s, ns = clock('')\n"
      "  ls, lns = later(s, ns, split(ARGV[4]))\n"
      "end\n"
      "redis.call('HSET', KEYS[1], 'r', ARGV[2], 'l', join(ls, lns))\n"
      "if held[2] == 'p' then redis.call('ZADD', KEYS[2], micros(ls, lns), ARGV[5]) end\n"
      "return 1\n";

  // KEYS: record. ARGV: now. Answers nil, or {n, s, f, c, l, e, v, r}.
  static constexpr const char* find = IDEM_REDIS_LUA_PRELUDE
      "local held = redis.call('HMGET', KEYS[1], 'n', 's', 'f', 'c', 'l', 'e', 'v', 'r')\n"
      "if not held[1] or not held[2] then return false end\n"
      "local s, ns = clock(ARGV[1])\n"
      "local es, ens = split(held[6])\n"
      "if reached(es, ens, s, ns) then return false end\n"
      "return {held[1], held[2], held[3], held[4], held[5], held[6], held[7] or '',\n"
      "        held[8] or ''}\n";

  // KEYS: expiry index, lease index. ARGV: now, batch, offset, record key prefix. Removes the
  // records of one scope that expired by `now` (or that Redis's TTL already dropped), from the
  // `offset`-th candidate on. Answers {removed, candidates seen, seen but not yet due, left}.
  static constexpr const char* sweep = IDEM_REDIS_LUA_PRELUDE
      "local s, ns = clock(ARGV[1])\n"
      "local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', micros(s, ns), 'LIMIT',\n"
      "                       tonumber(ARGV[3]), tonumber(ARGV[2]))\n"
      "local removed, kept = 0, 0\n"
      "for _, member in ipairs(due) do\n"
      "  local record = ARGV[4] .. member\n"
      "  local e = redis.call('HGET', record, 'e')\n"
      "  local gone = true\n"
      "  if e then\n"
      "    local es, ens = split(e)\n"
      "    gone = reached(es, ens, s, ns)\n"
      "    if gone then redis.call('DEL', record) end\n"
      "  end\n"
      "  if gone then\n"
      "    redis.call('ZREM', KEYS[1], member)\n"
      "    redis.call('ZREM', KEYS[2], member)\n"
      "    removed = removed + 1\n"
      "  else\n"
      "    kept = kept + 1\n"
      "  end\n"
      "end\n"
      "return {removed, #due, kept, redis.call('ZCARD', KEYS[1])}\n";

  // KEYS: lease index. ARGV: now, batch, offset, record key prefix. Answers {seen, then
  // key, n, f, c, l, e, r for each live in-progress record whose lease ended by `now`}.
  static constexpr const char* stuck = IDEM_REDIS_LUA_PRELUDE
      "local s, ns = clock(ARGV[1])\n"
      "local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', micros(s, ns), 'LIMIT',\n"
      "                       tonumber(ARGV[3]), tonumber(ARGV[2]))\n"
      "local out = {#due}\n"
      "for _, member in ipairs(due) do\n"
      "  local held = redis.call('HMGET', ARGV[4] .. member, 'n', 's', 'f', 'c', 'l', 'e', "
      "'r')\n"
      "  if held[2] == 'p' then\n"
      "    local ls, lns = split(held[5])\n"
      "    local es, ens = split(held[6])\n"
      "    if reached(ls, lns, s, ns) and not reached(es, ens, s, ns) then\n"
      "      local row = {member, held[1], held[3], held[4], held[5], held[6], held[7] or ''}\n"
      "      for _, v in ipairs(row) do out[#out + 1] = v end\n"
      "    end\n"
      "  end\n"
      "end\n"
      "return out\n";
};

#undef IDEM_REDIS_LUA_PRELUDE

// Which script a call runs: what redis_client loads at start and indexes its digests by.
enum class redis_script : std::uint8_t {
  claim,
  enroll,
  complete,
  release,
  checkpoint,
  find,
  sweep,
  stuck
};
inline constexpr std::size_t redis_script_count = 8;

inline const char* redis_script_text(redis_script which) noexcept {
  switch (which) {
    case redis_script::claim:
      return redis_scripts::claim;
    case redis_script::enroll:
      return redis_scripts::enroll;
    case redis_script::complete:
      return redis_scripts::complete;
    case redis_script::release:
      return redis_scripts::release;
    case redis_script::checkpoint:
      return redis_scripts::checkpoint;
    case redis_script::find:
      return redis_scripts::find;
    case redis_script::sweep:
      return redis_scripts::sweep;
    case redis_script::stuck:
      return redis_scripts::stuck;
  }
  return "";
}

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_SCRIPTS_HPP
