#!/usr/bin/env bash
# `make bench-shards`: keys over several servers, in one run on three throwaway clusters with
# durable defaults (fsync, synchronous_commit on): the plain client against a sharded client over
# a map of the same one server (per-key latency at 1 task; target: at most 1.1×), and pairs/s of
# sharded clients over maps of 1, 2 and 3 servers at 8 tasks, fresh keys, interleaved rounds,
# medians. The clusters share this machine's cores: what 3 servers add is capped by them.
# Results (results.md) go to $BUILD/bench/shards-<timestamp>/.
#
#   BENCH_SHARDS_ARGS="--rounds 12 --seconds 2" bash bench/shards.sh   (see bench-shards --help)
source "$(dirname "$0")/lib.sh"

out="$BUILD/bench/shards-$stamp"
read -r -a extra_args <<<"${BENCH_SHARDS_ARGS:-}"
echo "bench-shards: building bench-shards (release)"
"${CARGO:-cargo}" build --release -q -p bench-client --bin bench-shards

clusters=("$BUILD/bench-shards-1" "$BUILD/bench-shards-2" "$BUILD/bench-shards-3")
stop_clusters() {
  for c in "${clusters[@]}"; do bash "$cluster_sh" stop "$c" fast; done
}
ports=()
for c in "${clusters[@]}"; do bash "$cluster_sh" destroy "$c"; done
trap stop_clusters EXIT
for c in "${clusters[@]}"; do
  ports+=("$(env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE bash "$cluster_sh" start "$c" \
    "fsync = on" "synchronous_commit = on" "max_connections = 100" "shared_buffers = 128MB" \
    | sed -n 's/.* PGPORT=\([0-9]*\) .*/\1/p')")
done
echo "bench-shards: clusters :${ports[*]}"
mkdir -p "$out"
"${CARGO:-cargo}" run --release -q -p bench-client --bin bench-shards -- \
  --ports "$(IFS=,; echo "${ports[*]}")" --out "$out" "${extra_args[@]}"
echo
echo "bench-shards: written to $out/results.md"
