#!/usr/bin/env bash
# The accelerator checks (issue 38), run on a machine with a TPU and its JAX, from the
# repository's root: the tool from this checkout, its missing dependencies from wheels in
# .whl-tpu (that machine has no package registry; fetch them here with `make tpu-wheels`).
#
#   bash bench/device/tpu_check.sh [tests] [table] [remat] [verify] [--size full|small] [--only A,B]
#                                  [--no-commands] [--as-written] [--remat-only P,Q]
#                                  [--remat-budgets B,C] [--no-scan | --no-unrolled]
#                                  [--device-batch N] [--time-candidates N] [--remat-steps N]
#                                  [--cpu]
#
# Stages (default: all): `tests` runs the tests marked tpu (tests/test_device.py) and the
# command-line checks; `table` writes OUT/tpu_table.md (bench/device/tpu_table.py: each
# command against jax.jit / jax.grad / jax.jvp / jax.vmap on the chip); `remat` writes
# OUT/remat_tpu.md (bench/device/remat_tpu.py, where it exists); `verify` writes
# OUT/verify_tpu.md (bench/device/verify_tpu.py: check-grad and explain of the transformer
# with --device tpu, their verdicts judged as docs/CHECK_GRAD.md says).  OUT defaults to
# ./tpu-out.
# One program at a time can hold the chip: the stages run one after the other.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/tpu-out}
mkdir -p "$OUT"
SIZE=full
STAGES=()
TABLE_ARGS=()
REMAT_ARGS=()
# the remat stage's default rows (issue 48): budgets 0.5, 0.25 and 0.2 beside the table's 0.3
# and 1GB, unrolled and the scan twin, and --remat-budget device at a batch whose plain
# gradient exceeds the chip's memory (about 10 minutes on the v5e)
REMAT_BUDGETS=0.5,0.25,0.2
DEVICE_BATCH=64
CPU=0
while [ $# -gt 0 ]; do
  case "$1" in
    --size) SIZE=$2; shift 2 ;;
    # the table's programs whose name holds one of A,B; --no-commands leaves out its
    # command-line checks
    --only) TABLE_ARGS+=(--only "$2"); shift 2 ;;
    --no-commands|--as-written) TABLE_ARGS+=("$1"); shift ;;
    # the remat table's plans whose label holds one of P,Q; --no-scan leaves out its scan twin
    --remat-only) REMAT_ARGS+=(--only "$2"); shift 2 ;;
    # further --remat-budget fractions for the remat table, e.g. 0.2,0.15
    --remat-budgets) REMAT_BUDGETS=$2; shift 2 ;;
    --no-scan|--no-unrolled) REMAT_ARGS+=("$1"); shift ;;
    # run each plan the budget's loop compiled N steps and log its time (a time model's data)
    --time-candidates) REMAT_ARGS+=(--time-candidates "$2"); shift 2 ;;
    # timed steps per remat row (default 5; the chip's step times vary by about 0.5 ms
    # between runs of 5 steps, as much as the scan twin's rows differ)
    --remat-steps) REMAT_ARGS+=(--steps "$2"); shift 2 ;;
    # the batch of the rows beyond the chip's memory (default 64 on the 16 GB v5e; 0: none)
    --device-batch) DEVICE_BATCH=$2; shift 2 ;;
    # the remat stage on the CPU at small sizes (a memory of 4 MB for --remat-budget device):
    # a try of its rows on a machine without the chip
    --cpu) CPU=1; shift ;;
    *) STAGES+=("$1"); shift ;;
  esac
done
[ ${#STAGES[@]} -eq 0 ] && STAGES=(tests table remat verify)

if ls .whl-tpu/*.whl >/dev/null 2>&1; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps \
    --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-tpu/*.whl || exit 1
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site
fi
# the tool from this checkout; the machine's JAX stays first where PYTHONPATH names it
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
export PYTHONUNBUFFERED=1
# the TPU, not the tests' CPU default; XLA's own flags (the tests' CPU flags do not apply)
export JAX_PLATFORMS=${JAX_PLATFORMS_TPU:-tpu,cpu}
RDEV=tpu
if [ "$CPU" = 1 ]; then
  export JAX_PLATFORMS=cpu
  RDEV=cpu
  REMAT_ARGS+=(--small --device-limit 4e6)
  DEVICE_BATCH=8
fi
export XLA_FLAGS=
python3 -c 'import jax, platform; print("jax", jax.__version__, jax.devices(), "python", platform.python_version(), "glibc", platform.libc_ver())' \
  | tee "$OUT/env.txt"

status=0
for stage in "${STAGES[@]}"; do
  echo "== $stage"
  case "$stage" in
    tests)
      python3 -m pytest -q -p no:cacheprovider -p no:xdist -o addopts= -m tpu tests/test_device.py \
        2>&1 | tee "$OUT/tests.txt" | tail -15 || status=1
      ;;
    table)
      python3 bench/device/tpu_table.py --device tpu --size "$SIZE" --out "$OUT" \
        "${TABLE_ARGS[@]}" >> "$OUT/table.log" 2>&1 || status=1
      tail -25 "$OUT/table.log"
      ;;
    remat)
      if [ -f bench/device/remat_tpu.py ]; then
        python3 bench/device/remat_tpu.py --device "$RDEV" --out "$OUT" --budgets "$REMAT_BUDGETS" \
          --device-batch "$DEVICE_BATCH" "${REMAT_ARGS[@]}" \
          >> "$OUT/remat.log" 2>&1 || status=1
        tail -25 "$OUT/remat.log"
      else
        echo "bench/device/remat_tpu.py is not in this checkout: no remat table"
      fi
      ;;
    verify)
      python3 bench/device/verify_tpu.py --device tpu --size "$SIZE" --out "$OUT" \
        >> "$OUT/verify.log" 2>&1 || status=1
      tail -12 "$OUT/verify.log"
      ;;
    *) echo "unknown stage $stage"; status=2 ;;
  esac
done
exit $status
