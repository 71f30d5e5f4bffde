// A directory of its own for a test or benchmark, removed with everything in it when it goes.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace idem::testing {

class temporary_directory {
 public:
  /// Creates <temp dir>/<prefix>-<six random characters> (mkdtemp), readable by this user only.
  explicit temporary_directory(std::string_view prefix = "idem") {
    // mkdtemp replaces the template's last six characters, which must be 'X'.
    std::string pattern = (std::filesystem::temp_directory_path() / prefix).string();
    pattern.append("-").append(6, 'X');
    if (mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("cannot create a temporary directory from " + pattern);
    }
    path_ = pattern;
  }
  temporary_directory(const temporary_directory&) = delete;
  temporary_directory& operator=(const temporary_directory&) = delete;
  ~temporary_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  const std::filesystem::path& path() const noexcept { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace idem::testing
