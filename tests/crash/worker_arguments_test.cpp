// The crash workers refuse a command line they cannot use, before touching any database: exit
// status 2, with what is wrong and the usage on stderr (support/worker_io.hpp's worker_main), so
// that a test that passes them something wrong fails on that, not on a confusing run.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <string>
#include <vector>

#include "crash/crash_support.hpp"

TEST_CASE("a crash worker refuses arguments it cannot use with exit status 2",
          "[crash][concurrency]") {
  const std::vector<std::vector<std::string>> relay_mistakes{
      {},                                                                        // nothing at all
      {"--store=sqlite"},                                                        // no --outbox
      {"--store=mysql", "--outbox=x"},                                           // no such store
      {"--store=sqlite", "--outbox=x", "--die=sometimes"},                       // no such point
      {"--store=sqlite", "--outbox=x", "--die=after_fetch", "--die-batch=one"},  // not a number
      {"--store=sqlite", "--store=postgres", "--outbox=x"},                      // given twice
      {"store=sqlite"},                                                          // a stray word
  };
  for (const idem_crash::finished& run :
       idem_crash::run_together(IDEM_CRASH_RELAY_WORKER, relay_mistakes)) {
    INFO(run.text());
    CHECK((WIFEXITED(run.status) && WEXITSTATUS(run.status) == 2));
  }
  const std::vector<std::vector<std::string>> consumer_mistakes{
      {"--store=sqlite", "--inbox=x", "--die=after_effect"},  // no --victim
      {"--store=sqlite", "--inbox=x", "--die=never", "--victim=m"},
      {"--store=sqlite", "--inbox"},
  };
  for (const idem_crash::finished& run :
       idem_crash::run_together(IDEM_CRASH_CONSUMER_WORKER, consumer_mistakes)) {
    INFO(run.text());
    CHECK((WIFEXITED(run.status) && WEXITSTATUS(run.status) == 2));
  }
  const std::vector<std::vector<std::string>> reconcile_mistakes{
      {"--store=sqlite", "--sqlite=x", "--key=k", "--ledger=l"},  // no --die
      {"--store=sqlite", "--sqlite=x", "--key=k", "--ledger=l", "--die=after_refund"},
      {"--store=redis", "--redis-host=h", "--redis-port=p", "--prefix=p:", "--key=k", "--ledger=l",
       "--die=in_charge"},  // a port that is not a number
      {"--store=memory", "--key=k", "--ledger=l", "--die=in_charge"},  // no such store
  };
  for (const idem_crash::finished& run :
       idem_crash::run_together(IDEM_CRASH_RECONCILE_WORKER, reconcile_mistakes)) {
    INFO(run.text());
    CHECK((WIFEXITED(run.status) && WEXITSTATUS(run.status) == 2));
  }
}
