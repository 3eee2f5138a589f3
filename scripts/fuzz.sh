#!/usr/bin/env bash
# Fuzzes the input readers for a fixed budget: installs clang (Debian packages) if missing,
# builds the libFuzzer targets of tests/fuzz (ASan + UBSan) into ${FUZZ_BUILD_DIR:-build-fuzz},
# and runs each for ${FUZZ_SECONDS:-60} s, seeded from the committed corpora. Exits non-zero if
# any target crashed (a sanitizer report, an uncaught exception, a leak, a timeout); the input
# that did it is kept in ${FUZZ_BUILD_DIR}/crashes/<target>/ for a regression seed. CI runs it
# after scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/debian_packages.sh  # (the cd above: paths from the repo root)
ensure_debian_packages clang libclang-rt-dev

build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-60}
# -O1 keeps the build short and the checks in (no NDEBUG).
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DVITDDP_CUDA=OFF -DVITDDP_TESTS=OFF -DVITDDP_FUZZ=ON > /dev/null
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" --target vitddp_fuzzers

# target: seed folders (read only; new inputs go to a working corpus in the build folder)
declare -A seeds=(
  [safetensors]="tests/data/corpus/safetensors tests/data/corpus/safetensors_ok"
  [config_json]="configs configs/sweeps"
  [checkpoint_record]="tests/fuzz/seeds/checkpoint_record"
  [image_decode]="tests/fuzz/seeds/image_decode"
)
# All targets at once: on CI's 2 cores the step takes about $seconds s, not three times that.
pids=()
for name in safetensors config_json checkpoint_record image_decode; do
  corpus="$build_dir/corpus/$name"
  crashes="$build_dir/crashes/$name"
  mkdir -p "$corpus" "$crashes"
  dict=()
  [[ $name == config_json || $name == checkpoint_record ]] && dict=(-dict=tests/fuzz/json.dict)
  echo "fuzz: $name for $seconds s"
  # shellcheck disable=SC2086
  "$build_dir/fuzz/vitddp_fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "${dict[@]}" "$corpus" ${seeds[$name]} \
    > "$build_dir/fuzz_$name.log" 2>&1 &
  pids+=($!)
done
failed=()
i=0
for name in safetensors config_json checkpoint_record image_decode; do
  if ! wait "${pids[$i]}"; then
    failed+=("$name")
    echo "fuzz: $name FAILED; the end of its log ($build_dir/fuzz_$name.log):"
    tail -n 60 "$build_dir/fuzz_$name.log"
    echo "fuzz: reproducer(s) in $build_dir/crashes/$name: $(ls "$build_dir/crashes/$name")"
  else
    echo "fuzz: $name: $(grep -E '^stat::number_of_executed_units' "$build_dir/fuzz_$name.log" || true)"
  fi
  i=$((i + 1))
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in ${failed[*]}"
  exit 1
fi
echo "fuzz: no crash in ${seconds} s per target"
