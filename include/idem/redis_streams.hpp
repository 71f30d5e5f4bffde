// The outbox on Redis Streams: the sink a relay sends messages to and the consumer that makes
// each message's effect happen once. Needs hiredis (CMake: idem::redis); never part of idem.hpp.
//
//   idem::redis_streams::sink        an idem::Sink: a batch's XADDs pipelined in one round trip
//                                    (redis_streams/sink.hpp)
//   idem::stream_consumer<H, P>      a consumer group's member: XREADGROUP, the inbox by message
//                                    id, XACK after the record, stale entries claimed, dead
//                                    letters (redis_streams/consumer.hpp)
//   redis_streams/entry.hpp          the stream entry format both share
//   redis_streams/server.hpp         where their Redis listens (idem::redis_streams::server)
//
// docs/outbox_sinks.md and docs/outbox_consumer.md tell the whole story.
#ifndef IDEM_REDIS_STREAMS_HPP
#define IDEM_REDIS_STREAMS_HPP

#include <idem/redis_streams/consumer.hpp>
#include <idem/redis_streams/entry.hpp>
#include <idem/redis_streams/server.hpp>
#include <idem/redis_streams/sink.hpp>

#endif  // IDEM_REDIS_STREAMS_HPP
