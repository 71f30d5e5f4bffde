// Built against idem added with add_subdirectory. Exits 0 only if it sees version 0.1.0.
#include <idem/idem.hpp>

// argc is unused on purpose: -Wextra -Werror from idem's own build must not leak into ours.
int main(int argc, char**) {
  return idem::version == 100 ? 0 : 1;
}
