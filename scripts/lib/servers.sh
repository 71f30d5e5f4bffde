# Sourced by scripts/test.sh (and scripts/bench.sh): starts the real servers the store adapters'
# tests and benchmarks run against, and stops them when the calling script exits, however it
# exits.
#
# Each scripts/servers/<name>.sh is a small program with two commands:
#   <name>.sh start DIR   start the server with its data under DIR, listening on loopback on a
#                         port of its own; write DIR/<name>.env with `export IDEM_TEST_...=...`
#                         lines saying where it listens. Exit non-zero if it could not start.
#   <name>.sh stop DIR    stop it (and anything it left running); safe to call twice, or after
#                         a start that failed halfway.
# Their Debian packages are installed by the calling script beforehand.

idem_servers_dir=""
idem_servers_started=()
idem_servers_failed=()

idem_stop_servers() {
  local name
  for name in "${idem_servers_started[@]}"; do
    bash "$root/scripts/servers/$name.sh" stop "$idem_servers_dir" >/dev/null 2>&1 || true
  done
  idem_servers_started=()
  [[ -z "$idem_servers_dir" ]] || rm -rf "$idem_servers_dir"
  idem_servers_dir=""
}

# idem_start_servers: starts every server; those that fail are listed in idem_servers_failed.
idem_start_servers() {
  # mktemp fills in the template's trailing X characters (six of them here).
  idem_servers_dir="$(mktemp -d "${TMPDIR:-/tmp}/idem-servers.$(printf 'X%.0s' 1 2 3 4 5 6)")"
  chmod 755 "$idem_servers_dir"  # servers that drop root (PostgreSQL) need to reach it
  trap idem_stop_servers EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local script name
  for script in "$root"/scripts/servers/*.sh; do
    [[ -e "$script" ]] || continue
    name="$(basename "$script" .sh)"
    idem_servers_started+=("$name")  # before start: a half-started server is stopped too
    echo "== starting $name"
    if bash "$script" start "$idem_servers_dir" && [[ -r "$idem_servers_dir/$name.env" ]]; then
      # shellcheck disable=SC1090
      source "$idem_servers_dir/$name.env"
    else
      echo "scripts/servers/$name.sh: could not start $name" >&2
      idem_servers_failed+=("$name")
    fi
  done
}
