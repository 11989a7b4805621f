#!/bin/sh
# ctests of `executor_bench --netns` beyond its own run (bench/CMakeLists.txt):
#   netns_test.sh refused BENCH   where the machine does not permit network namespaces, --netns
#       must say why and exit 77 (not crash, not measure loopback instead). Two such places, made
#       with user namespaces: not root (euid 65534), and root inside a user namespace, where
#       `ip netns add` itself is refused.
#   netns_test.sh teardown BENCH  SIGTERM in the middle of a run: the benchmark ends by that
#       signal and its namespace and veth pair are gone.
# Exit 0 when the check held, 1 when not, 77 (skipped, the reason printed) where the place to
# check cannot be made here.
set -u
what=$1
bench=$2

refused() {
  if ! unshare --user true 2>/dev/null; then
    echo "SKIPPED: unshare --user is not permitted here, so no place without namespace rights can be made"
    exit 77
  fi
  for how in "--user" "--user --map-root-user"; do
    # $how is two words on purpose.
    out=$(unshare $how "$bench" --netns --sizes 65536 --working-set 1048576 --no-plan --no-perftest --reps 1 2>&1)
    rc=$?
    if [ "$rc" -ne 77 ] || ! printf '%s\n' "$out" | grep -q "which this machine does not permit"; then
      echo "unshare $how: expected exit 77 and the refusal, got exit $rc:"
      printf '%s\n' "$out"
      exit 1
    fi
    echo "unshare $how: refused as expected (exit 77): $out"
  done
}

teardown() {
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  "$bench" --netns --sizes 65536 --working-set 268435456 --no-plan --no-perftest --reps 3 >/dev/null 2>"$log" &
  pid=$!
  line=""
  i=0
  while [ $i -lt 200 ] && kill -0 "$pid" 2>/dev/null; do
    line=$(grep -m1 '^netns: P in ' "$log")
    [ -n "$line" ] && break
    sleep 0.1
    i=$((i + 1))
  done
  if [ -z "$line" ]; then
    wait "$pid"
    rc=$?
    if [ "$rc" -eq 77 ]; then
      echo "SKIPPED: $(cat "$log")"
      exit 77
    fi
    echo "the benchmark (exit $rc) never said where P runs:"
    cat "$log"
    exit 1
  fi
  # "netns: P in <name> at <ip> (<ns if>), D at <ip> (<host if>)"
  name=$(printf '%s\n' "$line" | sed 's/^netns: P in \([^ ]*\) .*/\1/')
  host_if=$(printf '%s\n' "$line" | sed 's/.*(\([^)]*\))$/\1/')
  sleep 1  # P forked, bytes moving
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  ok=1
  if [ "$rc" -ne 143 ]; then
    echo "expected the benchmark to end by SIGTERM (exit 143), got exit $rc"
    ok=0
  fi
  if ip netns list | grep -q "^$name\b"; then
    echo "namespace $name is still there after SIGTERM"
    ip netns del "$name"
    ok=0
  fi
  if ip link show "$host_if" >/dev/null 2>&1; then
    echo "interface $host_if is still there after SIGTERM"
    ip link del "$host_if"
    ok=0
  fi
  if [ $ok -ne 1 ]; then
    cat "$log"
    exit 1
  fi
  echo "SIGTERM: exit $rc, namespace $name and interface $host_if removed"
}

case "$what" in
  refused) refused ;;
  teardown) teardown ;;
  *) echo "usage: netns_test.sh refused|teardown BENCH"; exit 1 ;;
esac
