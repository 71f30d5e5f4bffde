// redis_store: the store contract (idem/store/contract.hpp) on Redis, through hiredis.
//
// For services whose shared state already lives in Redis. Every operation is one Lua script run
// atomically by the server, so the store is exactly as atomic per record as the contract asks:
//   claim       one script: reads the record, then creates it (with the claim's recovery
//               bytes), takes it over (fence + 1, its recovery bytes kept), or answers its
//               snapshot; the whole record is written in that one step;
//   complete,   compare-and-set on the fence, in a script each; release keeps the fence as a
//   release,    tombstone until the record expires;
//   checkpoint
//   find        one read-only script.
// Scripts are sent with EVALSHA (loaded at construction) and fall back to EVAL when the server
// answers NOSCRIPT, as it does after a restart.
//
// Time. With `time_source::server` (the default) every lease and expiry is computed from the
// server's clock (`TIME` inside the scripts) and records carry a Redis TTL ending at their
// expiry, so clients whose clocks disagree still agree on who holds a claim; the `now` the store
// is given is not used (a checkpoint's lease_until is read as "this long from now"). With
// `time_source::caller` the store honours the `now` it is given, as the contract describes and as
// tests with a manual clock need; the Redis TTL is then the retention plus
// `options::caller_time_margin`, so Redis never drops a record a caller still counts as live.
//
// Keys. Every key of one record carries the hash tag of its scope, so a Redis Cluster would keep
// a record, and its scope's indexes, in one slot; the scope is written in hexadecimal, so any
// bytes are allowed and two scopes' keys never meet (the layout: store/redis/detail/keys.hpp). The
// set P#scopes (P the prefix) names the scopes that may hold records. It spans slots, so it is
// never written inside a record's script: claim adds the scope right after its script (same
// connection, same round trip), and sweep removes a scope only by removing it first and adding
// it back if its index is not empty, so a scope with records is never lost from it, whatever the
// interleaving.
// The store talks to one Redis server (hiredis has no cluster client); the layout is what a
// cluster-aware deployment needs.
//
// Eviction. A store that silently loses records loses exactly-once: construction refuses a
// server whose maxmemory-policy is any allkeys-* or volatile-* policy (the records all carry
// TTLs, so volatile-* would evict them too). Use noeviction: a full server then answers claims
// with `full` and complete/checkpoint with store_error(full). A server that hides CONFIG (renamed,
// or an ACL without it) cannot be checked: construction refuses it too, unless
// `options::verify_eviction_policy` is false, which says the operator vouches for the policy.
//
// Connections. A store is a handle: copies share one pool of at most `pool_size` connections,
// safe to use from many threads. A connection that fails is dropped (with every idle one, when
// the server went away), and a fresh one is made on the next call; a call that failed on a
// reused connection because the server had closed it is sent once more on a fresh one, which is
// safe here (a repeated claim answers `existing`, a repeated complete, release or checkpoint is
// fenced). A call the server does not answer throws store_error(unavailable): never a silent
// loss. SIGPIPE is blocked around each exchange (the libpq way), so a dropped connection cannot
// kill the process (unless the process ignores SIGPIPE when the store is made: then it costs
// nothing; keep it ignored). Sweep and stuck pipeline their per-scope scripts.
//
// Replicas. With `options::replicas` N > 0, each claim, complete, release and checkpoint sends
// WAIT N after its script in the same round trip (a claim a PUBLISH first, so that a claim that
// only read a record waits for that record's replication too), and fewer than N acknowledgements
// within `replica_timeout` throw store_error(unavailable): ambiguous, as a timeout is. WAIT is
// not consensus: a failover that promotes a replica that did not acknowledge still loses the
// write (docs/stores/redis.md, "Replicas and failover"). With `options::sentinels`, each new
// connection asks the Sentinels for the primary and checks ROLE, and a write answered READONLY
// (a demoted primary) drops every connection and is sent once more to the primary found again.
//
// Durability is Redis's: see docs/stores/redis.md (appendfsync always vs everysec, failover).
// Needs Redis 7.0 or newer (one script declares the allow-oom flag). Every option and its
// default: docs/stores/redis.md. The parts, in store/redis/: the scripts (scripts.hpp), the keys'
// names and the scripts' arguments (keys.hpp), each operation's script calls, the decoding of
// their answers (operations.hpp), sweep's and stuck's walks (walks.hpp; both shared with
// async_redis_store), a script call (command.hpp), connecting, the checks at start and the
// exchanges (connection.hpp), the decoding of a record (reply.hpp), SIGPIPE (sigpipe.hpp).
#ifndef IDEM_STORE_REDIS_HPP
#define IDEM_STORE_REDIS_HPP

#include <idem/store/redis/detail/batch.hpp>
#include <idem/store/redis/detail/store.hpp>

#endif  // IDEM_STORE_REDIS_HPP
