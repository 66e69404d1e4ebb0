# Shared by the scripts in this folder (sourced, not run).
set -euo pipefail

TESSEL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TESSEL_PRESET=${TESSEL_PRESET:-default}
TESSEL_BUILD="$TESSEL_ROOT/build/$TESSEL_PRESET"
TESSEL_JOBS=${TESSEL_JOBS:-$(nproc)}

# Open MPI refuses to run as root or to place more ranks than cores unless told; other MPIs ignore these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

tessel_configure_and_build() {
  cmake --preset "$TESSEL_PRESET" -S "$TESSEL_ROOT" "$@"
  cmake --build "$TESSEL_BUILD" -j "$TESSEL_JOBS"
}
