#!/usr/bin/env bash
# registry.sh builds the CNCF distribution registry
# (github.com/distribution/distribution/v3, cmd/registry) from the Go module
# proxy and installs it into a cache directory outside the clone, keyed by
# version. It prints the directory holding the binary on stdout (progress goes
# to stderr), so callers can do:
#
#   export WASMRECONCILE_REGISTRY="$(hack/registry.sh)/registry"
#
# The OCI tests start this binary on loopback. It is idempotent: when the
# binary exists it returns at once. A cold build takes about a minute.
#
# Environment (all optional):
#   WASMRECONCILE_CACHE    cache root. Default: $XDG_CACHE_HOME/wasmreconcile or
#                          $HOME/.cache/wasmreconcile.
#   DISTRIBUTION_VERSION   registry version. Default: v3.1.2.
set -euo pipefail

DISTRIBUTION_VERSION="${DISTRIBUTION_VERSION:-v3.1.2}"
CACHE_ROOT="${WASMRECONCILE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmreconcile}"
BIN="$CACHE_ROOT/registry/distribution-${DISTRIBUTION_VERSION}/bin"

start=$(date +%s)
log() { printf '[registry +%ss] %s\n' "$(( $(date +%s) - start ))" "$*" >&2; }
die() { printf 'registry: error: %s\n' "$*" >&2; exit 1; }

if [[ -x "$BIN/registry" ]]; then
  echo "$BIN"
  exit 0
fi
command -v go >/dev/null || die "go is not on PATH; install Go 1.26 or later"

mkdir -p "$CACHE_ROOT/registry"
exec 9>"$CACHE_ROOT/registry/.lock"
if ! flock -n 9; then
  log "another build holds $CACHE_ROOT/registry/.lock; waiting for it"
  flock 9
fi
if [[ -x "$BIN/registry" ]]; then
  echo "$BIN"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod
cat >"$work/go.mod" <<GOMOD
module wasmreconcile.local/registry

go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')
GOMOD
log "downloading github.com/distribution/distribution/v3@${DISTRIBUTION_VERSION}"
if ! out="$(cd "$work" && go get -tool "github.com/distribution/distribution/v3/cmd/registry@${DISTRIBUTION_VERSION}" 2>&1)"; then
  printf '%s\n' "$out" | tail -n 20 >&2
  die "could not download distribution ${DISTRIBUTION_VERSION} from the Go module proxy ($(go env GOPROXY)); check network access to the proxy and that the version exists"
fi
log "compiling registry"
mkdir -p "$BIN.tmp"
(cd "$work" && go build -trimpath -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=${DISTRIBUTION_VERSION}" -o "$BIN.tmp/registry" github.com/distribution/distribution/v3/cmd/registry)
"$BIN.tmp/registry" --version >&2 || true
mkdir -p "$BIN"
mv -f "$BIN.tmp/registry" "$BIN/registry"
rmdir "$BIN.tmp"
log "installed into $BIN"
echo "$BIN"
