#!/usr/bin/env bash
# controlplane.sh builds a real Kubernetes control plane (kube-apiserver,
# kube-controller-manager, kubectl, etcd) from the Go module proxy and installs it into a cache directory outside
# the clone, keyed by version. It prints the directory holding the binaries on
# stdout (progress goes to stderr), so callers can do:
#
#   export KUBEBUILDER_ASSETS="$(hack/controlplane.sh)"
#
# It is idempotent: when the binaries for these versions exist it returns at once.
# It builds only what is missing, so a cache made before kube-controller-manager
# was added gains that one binary (about 5 minutes) without rebuilding the rest.
#
# Environment (all optional):
#   WASMRECONCILE_CACHE  cache root. Default: $XDG_CACHE_HOME/wasmreconcile or
#                        $HOME/.cache/wasmreconcile.
#   K8S_VERSION          kube-apiserver/kubectl version. Default: v1.37.2.
#   ETCD_VERSION         etcd version. Default: v3.7.3.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"
CACHE_ROOT="${WASMRECONCILE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmreconcile}"
DEST="$CACHE_ROOT/controlplane/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}"
BIN="$DEST/bin"

start=$(date +%s)
log() { printf '[controlplane +%ss] %s\n' "$(( $(date +%s) - start ))" "$*" >&2; }
die() { printf 'controlplane: error: %s\n' "$*" >&2; exit 1; }

K8S_TOOLS=(kube-apiserver kube-controller-manager kubectl)
# missing prints the binaries not yet in $BIN.
missing() {
  local b
  for b in "${K8S_TOOLS[@]}" etcd; do [[ -x "$BIN/$b" ]] || echo "$b"; done
}
if [[ -z "$(missing)" ]]; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || die "go is not on PATH; install Go 1.26 or later"

# Serialise concurrent builds (two make targets, two clones) on one lock.
mkdir -p "$CACHE_ROOT/controlplane"
exec 9>"$CACHE_ROOT/controlplane/.lock"
if ! flock -n 9; then
  log "another build holds $CACHE_ROOT/controlplane/.lock; waiting for it"
  flock 9
fi
if [[ -z "$(missing)" ]]; then
  echo "$BIN"
  exit 0
fi

todo="$(missing | tr '\n' ' ')"
log "building control plane (k8s ${K8S_VERSION}, etcd ${ETCD_VERSION}): ${todo}"
log "first build only: this takes 10-15 minutes and ~2.5 GB of memory; later runs reuse $BIN"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod
rm -rf "$BIN.tmp"
mkdir -p "$BIN.tmp"
# needs reports whether binary $1 must be built.
needs() { [[ ! -x "$BIN/$1" ]]; }

# fetch runs a go command that downloads modules and turns a proxy refusal into
# a clear error.
fetch() {
  local what="$1"; shift
  if ! out="$("$@" 2>&1)"; then
    printf '%s\n' "$out" | tail -n 20 >&2
    die "could not download ${what} from the Go module proxy ($(go env GOPROXY)); check network access to the proxy and that the version exists"
  fi
}

# --- kube-apiserver and kubectl ---------------------------------------------
k8s_minor="${K8S_VERSION#v1.}"; k8s_minor="${k8s_minor%%.*}"
staging_version="v0.${K8S_VERSION#v1.}"
log "resolving k8s.io/kubernetes@${K8S_VERSION}"
fetch "k8s.io/kubernetes@${K8S_VERSION}" go mod download -json "k8s.io/kubernetes@${K8S_VERSION}"
gomod="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
[[ -f "$gomod" ]] || die "could not locate go.mod of k8s.io/kubernetes@${K8S_VERSION}"

mkdir -p "$work/k8s"
{
  echo "module wasmreconcile.local/controlplane/k8s"
  echo
  echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
  echo
  echo "require k8s.io/kubernetes ${K8S_VERSION}"
  echo
  # Every staging module is required as v0.0.0 and replaced by a relative path
  # inside the kubernetes repo; point each at its published tag instead.
  grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk '{print $1}' | sort -u |
    while read -r m; do echo "replace $m => $m ${staging_version}"; done
} >"$work/k8s/go.mod"
log "wrapper module has $(grep -c '^replace' "$work/k8s/go.mod") staging replaces"

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${k8s_minor} -X k8s.io/component-base/version.gitTreeState=clean"
k8s_todo=()
for b in "${K8S_TOOLS[@]}"; do needs "$b" && k8s_todo+=("$b"); done
if (( ${#k8s_todo[@]} > 0 )); then
(
  cd "$work/k8s"
  for b in "${k8s_todo[@]}"; do
    log "downloading $b dependencies (go get -tool)"
    fetch "$b ${K8S_VERSION}" go get -tool "k8s.io/kubernetes/cmd/$b@${K8S_VERSION}"
  done
  for b in "${k8s_todo[@]}"; do
    log "compiling $b"
    go build -trimpath -ldflags "$ldflags" -o "$BIN.tmp/$b" "k8s.io/kubernetes/cmd/$b"
  done
)
fi

# --- etcd -------------------------------------------------------------------
if needs etcd; then
mkdir -p "$work/etcd"
cat >"$work/etcd/go.mod" <<GOMOD
module wasmreconcile.local/controlplane/etcd

go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')
GOMOD
(
  cd "$work/etcd"
  log "downloading etcd ${ETCD_VERSION}"
  fetch "etcd ${ETCD_VERSION}" go get -tool "go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
  log "compiling etcd"
  go build -trimpath -ldflags "-s -w" -o "$BIN.tmp/etcd" go.etcd.io/etcd/server/v3
)
fi

# Move the new binaries in one by one; binaries already there stay untouched.
mkdir -p "$BIN"
for b in "$BIN.tmp"/*; do
  [[ -e "$b" ]] || continue
  # kubectl has no --version (it is `kubectl version --client`): a
  # version line is for the log only and never fails the build.
  case "$(basename "$b")" in
    kubectl) { "$b" version --client 2>&1 || true; } | head -1 >&2 ;;
    *) { "$b" --version 2>&1 || true; } | head -1 >&2 ;;
  esac
  mv -f "$b" "$BIN/"
done
rmdir "$BIN.tmp"
[[ -z "$(missing)" ]] || die "still missing after the build: $(missing | tr '\n' ' ')"
log "installed into $BIN"
echo "$BIN"
