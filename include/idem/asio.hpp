// idem on Asio: the asynchronous drivers, for services that run on an event loop (Boost.Asio,
// Beast, coroutines). Boost.Asio by default; standalone Asio with IDEM_ASIO_STANDALONE (see
// idem/async/asio.hpp). Not part of <idem/idem.hpp> nor of the single header: link idem::asio
// (or idem::asio_standalone) and include this header.
//
// What it holds, each beside what it shares with its blocking twin:
// - async_retrying<Call, Policies>: retries with co_await, waits on timers
//   (idem/client/async_retrying.hpp).
// - async_idempotent<Handler, Policies>: guarded coroutine handlers
//   (idem/server/async_idempotent.hpp), given an async_handler_context
//   (idem/server/async_handler_context.hpp); see docs/async_server.md.
// - async_inbox<Policies>: consumers that act once per event (idem/server/async_inbox.hpp).
// - clock_timer<Clock>: waits on the executor by the policies' clock (idem/async/timer.hpp).
// The asynchronous stores are their backend's: idem/store/postgres/async.hpp,
// idem/store/redis/async.hpp; what one implements is idem/store/async_contract.hpp.
#ifndef IDEM_ASIO_HPP
#define IDEM_ASIO_HPP

#include <idem/async/asio.hpp>
#include <idem/async/timer.hpp>
#include <idem/client/async_retrying.hpp>
#include <idem/idem.hpp>
#include <idem/server/async_handler_context.hpp>
#include <idem/server/async_idempotent.hpp>
#include <idem/server/async_inbox.hpp>

#endif  // IDEM_ASIO_HPP
