// stream_error: Redis refused a stream command (NOGROUP: the consumer group is gone; WRONGTYPE:
// the stream's name holds something else; OOM: the server is full) or answered in a shape no
// stream command answers. A server that cannot be reached is idem::store_error(unavailable)
// instead, as for the Redis store. Standard library only.
#ifndef IDEM_REDIS_STREAMS_STREAM_ERROR_HPP
#define IDEM_REDIS_STREAMS_STREAM_ERROR_HPP

#include <stdexcept>

namespace idem {

class stream_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace idem

#endif  // IDEM_REDIS_STREAMS_STREAM_ERROR_HPP
