// sqlite_error: what the handler's own SQL throws inside sqlite_store::complete_within. Apart
// from the store so that the connection code can throw it too.
#ifndef IDEM_STORE_SQLITE_ERROR_HPP
#define IDEM_STORE_SQLITE_ERROR_HPP

#include <stdexcept>
#include <string>

namespace idem {

/// An error from the handler's own SQL, run through sqlite_store::transaction's exec or query.
/// Carries SQLite's extended result code (SQLITE_CONSTRAINT_UNIQUE, ...).
class sqlite_error : public std::runtime_error {
 public:
  sqlite_error(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

}  // namespace idem

#endif  // IDEM_STORE_SQLITE_ERROR_HPP
