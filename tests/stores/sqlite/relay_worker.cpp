// idem_sqlite_relay_worker: an outbox relay in a process of its own, for the crash test in
// sqlite_outbox_relay_process_test.cpp. It relays the outbox of DB with the default policies
// (the system's clocks) into a sink that prints each message it is handed, "sent ID", with one
// write(2) each (what a consumer would have received), then prints "acknowledged" and, before
// answering the relay, waits for a byte on stdin: the test kills it there with SIGKILL, after
// the sink took the batch and before the relay settled it. Given a byte, it acknowledges, and the
// relay settles and goes on (looking again every 5 ms when nothing is due); at the end of stdin
// it exits.
//
//   relay DB BATCH_SIZE
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <thread>

#include <idem/outbox/relay.hpp>
#include <idem/store/sqlite/outbox_reader.hpp>

namespace {

void say(const std::string& line) {
  const std::string text = line + "\n";
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t written = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (written <= 0) std::_Exit(3);
    done += static_cast<std::size_t>(written);
  }
}

struct printing_sink {
  bool open = true;
  void publish(std::span<const idem::outbox_entry> batch, std::span<idem::sink_result> results) {
    for (const idem::outbox_entry& entry : batch)
      say("sent " + entry.id);
    say("acknowledged");
    char byte = 0;
    open = ::read(STDIN_FILENO, &byte, 1) == 1;
    for (idem::sink_result& result : results)
      result.status = idem::sink_status::acknowledged;
  }
};

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 4 || std::string(argv[1]) != "relay") {
    std::fprintf(stderr, "usage: %s relay DB BATCH_SIZE\n", argv[0]);
    return 2;
  }
  idem::sqlite_outbox::reader outbox(argv[2], {.holder = "worker"});
  printing_sink sink;
  idem::relay_options options;
  options.batch_size = std::stoul(argv[3]);
  idem::outbox_relay<idem::sqlite_outbox::reader, printing_sink> relay(outbox, sink, options);
  // Until stdin ends (or the test kills it): a pass that finds nothing due waits a little, as
  // run() would, and looks again.
  while (sink.open) {
    if (relay.run_once().fetched == 0) std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  say("done");
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "idem_sqlite_relay_worker: %s\n", error.what());
  return 1;
}
