// idem on Asio: the asynchronous drivers, for services that run on an event loop (Boost.Asio,
// Beast, coroutines). Boost.Asio by default; standalone Asio with IDEM_ASIO_STANDALONE (see
// idem/asio/config.hpp). Not part of <idem/idem.hpp> nor of the single header: link idem::asio
// (or idem::asio_standalone) and include this header.
//
// What it holds, one header each under idem/asio/:
// - async_retrying<Call, Policies>: retries with co_await, waits on timers (retrying.hpp).
// - async_idempotent<Handler, Policies>: guarded coroutine handlers (idempotent.hpp), given an
//   async_handler_context (handler_context.hpp); see docs/async_server.md.
// - async_inbox<Policies>: consumers that act once per event (inbox.hpp).
// - clock_timer<Clock>: waits on the executor by the policies' clock (timer.hpp).
#ifndef IDEM_ASIO_HPP
#define IDEM_ASIO_HPP

#include <idem/asio/config.hpp>
#include <idem/asio/handler_context.hpp>
#include <idem/asio/idempotent.hpp>
#include <idem/asio/inbox.hpp>
#include <idem/asio/retrying.hpp>
#include <idem/asio/timer.hpp>
#include <idem/idem.hpp>

#endif  // IDEM_ASIO_HPP
