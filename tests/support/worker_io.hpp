// What every test worker program shares (the small processes the crash and storm tests fork,
// exec and kill): a line of output written with one write(2), so the test sees it even when the
// next instant is a SIGKILL; its arguments, read with a clear error when one is missing or
// malformed; and main's frame, which turns those errors into an exit status and a message.
//
//   int main(int argc, char** argv) {
//     return idem::testing::worker_main("idem_x_worker", "idem_x_worker --db=PATH [--runs=N]",
//                                       [&] {
//       const idem::testing::worker_arguments arguments(argc, argv);
//       idem::testing::say("ready " + arguments.option("db"));
//       return 0;
//     });
//   }
//
// Standard library and POSIX only, header-only.
#ifndef IDEM_TESTS_SUPPORT_WORKER_IO_HPP
#define IDEM_TESTS_SUPPORT_WORKER_IO_HPP

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace idem::testing {

/// Writes `line` and a newline to stdout in one write(2) (repeated only for what a short write
/// left): nothing is buffered in the process, so a kill right after cannot lose it. A stdout
/// that is gone (the test ended) ends the worker with status 3.
inline void say(std::string_view line) {
  std::string text(line);
  text += '\n';
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t written = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) std::_Exit(3);
    done += static_cast<std::size_t>(written);
  }
}

/// A worker's command line that does not say what it must: worker_main prints the usage and
/// exits with status 2.
class worker_usage_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A worker's arguments: words (positional, in order) and options (`--name=value`, any order,
/// each at most once).
class worker_arguments {
 public:
  worker_arguments(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string_view argument = argv[i];
      if (!argument.starts_with("--")) {
        words_.emplace_back(argument);
        continue;
      }
      const std::size_t equals = argument.find('=');
      if (equals == std::string_view::npos || equals == 2) {
        throw worker_usage_error("'" + std::string(argument) + "' is not --name=value");
      }
      const std::string name(argument.substr(2, equals - 2));
      if (!options_.emplace(name, argument.substr(equals + 1)).second) {
        throw worker_usage_error("--" + name + " is given twice");
      }
    }
  }

  std::size_t words() const noexcept { return words_.size(); }
  /// For a worker that takes options only: a worker_usage_error naming the first word.
  void expect_no_words() const {
    if (!words_.empty()) throw worker_usage_error("unexpected argument '" + words_.front() + "'");
  }

  /// The word at `index` (0 is the first after the program's name).
  const std::string& word(std::size_t index) const {
    if (index >= words_.size()) {
      throw worker_usage_error("argument " + std::to_string(index + 1) + " is missing");
    }
    return words_[index];
  }
  std::int64_t word_number(std::size_t index) const {
    return number_of(word(index), "argument " + std::to_string(index + 1));
  }
  /// The words from `index` on.
  std::vector<std::string> words_from(std::size_t index) const {
    if (index >= words_.size()) return {};
    return {words_.begin() + static_cast<std::ptrdiff_t>(index), words_.end()};
  }

  /// The value of --name=value; a worker_usage_error when it is not given.
  const std::string& option(const std::string& name) const {
    const auto found = options_.find(name);
    if (found == options_.end()) throw worker_usage_error("--" + name + "=... is missing");
    return found->second;
  }
  std::string option_or(const std::string& name, std::string fallback) const {
    const auto found = options_.find(name);
    return found == options_.end() ? std::move(fallback) : found->second;
  }
  std::int64_t number(const std::string& name) const {
    return number_of(option(name), "--" + name);
  }
  std::int64_t number_or(const std::string& name, std::int64_t fallback) const {
    return options_.contains(name) ? number(name) : fallback;
  }

 private:
  static std::int64_t number_of(std::string_view text, const std::string& what) {
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc{} || end != text.data() + text.size()) {
      throw worker_usage_error(what + " is not a whole number: '" + std::string(text) + "'");
    }
    return value;
  }

  std::vector<std::string> words_;
  std::map<std::string, std::string, std::less<>> options_;
};

/// main's frame for a worker: runs `body` (which answers the exit status). A worker_usage_error
/// prints "PROGRAM: WHAT" and "usage: USAGE" on stderr and exits 2; any other exception prints
/// "PROGRAM: WHAT" and exits 1.
template <class Body>
int worker_main(const char* program, const char* usage, Body body) {
  try {
    return body();
  } catch (const worker_usage_error& error) {
    std::fprintf(stderr, "%s: %s\nusage: %s\n", program, error.what(), usage);
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: %s\n", program, error.what());
    return 1;
  }
}

}  // namespace idem::testing

#endif  // IDEM_TESTS_SUPPORT_WORKER_IO_HPP
