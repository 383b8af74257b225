#!/usr/bin/env bash
# Builds the upstream programs the e2e cluster runs, at the versions pinned in e2e/versions.env,
# from the Go module proxy. There is no container engine on the machines this project is
# developed and tested on, so the control plane runs as plain processes built from source.
#
# Each component is built in a throwaway Go module outside the repository and its binaries are
# cached per version in $BERTH_E2E_CACHE (default ~/.cache/berth-e2e)/<component>-<version>/bin.
# A cached component is not rebuilt. Nothing is ever written into the repository.
#
# usage: e2e/build.sh [kubernetes|kubectl|etcd|kwok|kueue|volcano|volcano-controllers|volcano-webhook|
#                      helm|core|all]...
#   (default: core); core = kubernetes etcd kwok; volcano = its scheduler + volcano-controllers;
#   all = core kubectl kueue volcano helm
#        e2e/build.sh --bin-dir COMPONENT   prints where its binaries are cached
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
# Another control plane version (e2e/ci.sh: KUBERNETES_NEWEST_VERSION), cached beside the pinned.
KUBERNETES_VERSION="${BERTH_E2E_KUBERNETES_VERSION:-$KUBERNETES_VERSION}"
cache="${BERTH_E2E_CACHE:-$HOME/.cache/berth-e2e}"
mkdir -p "$cache"

export CGO_ENABLED=0
export GOFLAGS="-trimpath -buildvcs=false -mod=mod"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
ldflags_strip="-s -w"

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Runs "$2..." to build component $1 into a fresh bin dir unless it is cached already.
# The build happens in a temporary module dir; on success bin/ is moved into place atomically
# and the seconds it took are written beside it.
build_cached() {
    local name="$1"; shift
    local dest="$cache/$name"
    if [[ -f "$dest/.complete" ]]; then
        log "$name: cached in $dest"
        return 0
    fi
    local work
    work="$(mktemp -d "${TMPDIR:-/tmp}/berth-e2e-build-$name.XXXXXX")"
    local start=$SECONDS
    log "$name: building in $work"
    # errexit is off inside a command whose status is tested (`if ! (...)`), so a failing step
    # would go unnoticed: the build runs as a job of its own and only its exit status is tested
    (set -e; cd "$work"; "$@") &
    if ! wait $!; then
        log "$name: BUILD FAILED (module left in $work)"
        return 1
    fi
    if [[ -z "$(ls -A "$work/bin" 2>/dev/null)" ]]; then
        log "$name: BUILD FAILED: no binary in $work/bin"
        return 1
    fi
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
    mv "$work/bin" "$dest.tmp/bin"
    cp "$work/go.mod" "$dest.tmp/go.mod"
    [[ -d "$work/share" ]] && mv "$work/share" "$dest.tmp/share"
    echo "$((SECONDS - start))" > "$dest.tmp/build-seconds"
    touch "$dest.tmp/.complete"
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
    rm -rf "$work"
    log "$name: built in $((SECONDS - start))s -> $dest/bin"
}

# Directory of a module version's source in the module cache, downloading it if needed.
module_dir() {
    go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}

# --- Kubernetes: k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
# ./staging paths, which only work inside its own repository. A wrapper module replaces each of
# them with the published k8s.io/<name> v0.<minor>.<patch> instead.
build_kubernetes_in_cwd() {
    build_kubernetes_cmds_in_cwd kube-apiserver kube-scheduler kube-controller-manager
}

# kubectl is its own component so that adding it does not invalidate a cached control plane;
# it shares the module and build caches with the control plane build.
build_kubectl_in_cwd() {
    build_kubernetes_cmds_in_cwd kubectl
}

build_kubernetes_cmds_in_cwd() {
    local v="$KUBERNETES_VERSION" staging_v="v0.${KUBERNETES_VERSION#v1.}"
    local gomod
    gomod="$(go mod download -json "k8s.io/kubernetes@$v" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
    {
        echo "module berth.local/e2e-kubernetes"
        echo
        echo "go 1.24.0"
        echo
        echo "godebug default=go1.24"
        echo
        echo "require k8s.io/kubernetes $v"
        echo
        echo "replace ("
        sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_v"'#p' "$gomod"
        echo ")"
    } > go.mod
    local n
    n="$(grep -c '=> k8s.io/' go.mod)"
    log "kubernetes: $n staging modules replaced with $staging_v"
    [[ "$n" -gt 20 ]] || { log "kubernetes: too few staging replaces found in $gomod"; return 1; }
    local cmds=("$@")
    local pkgs=()
    for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c@$v"); done
    go get "${pkgs[@]}"
    # Stamped version: clients such as Kueue parse the server version and refuse the default.
    local major="${v#v}"; major="${major%%.*}"
    local minor="${v#v*.}"; minor="${minor%%.*}"
    local ld="$ldflags_strip" p
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ld+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor"
        ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
    done
    mkdir -p bin
    for c in "${cmds[@]}"; do
        log "kubernetes: go build $c"
        go build -ldflags "$ld" -o "bin/$c" "k8s.io/kubernetes/cmd/$c"
    done
}

# --- etcd: the server's go.mod has relative replaces, so it is required from a wrapper module.
build_etcd_in_cwd() {
    local v="$ETCD_VERSION"
    printf 'module berth.local/e2e-etcd\n\ngo 1.24.0\n' > go.mod
    go get "go.etcd.io/etcd/server/v3@$v"
    mkdir -p bin
    go build -ldflags "$ldflags_strip" -o bin/etcd go.etcd.io/etcd/server/v3
}

# --- kwok: a plain module without replaces.
build_kwok_in_cwd() {
    local v="$KWOK_VERSION"
    printf 'module berth.local/e2e-kwok\n\ngo 1.24.0\n' > go.mod
    go get "sigs.k8s.io/kwok/cmd/kwok@$v"
    mkdir -p bin
    go build -ldflags "$ldflags_strip" -o bin/kwok sigs.k8s.io/kwok/cmd/kwok
}

# --- Kueue manager. Its CRDs and webhook manifests ship in the module; they are copied next to
# the binary (share/) so the cluster can apply them without the module cache.
build_kueue_in_cwd() {
    local v="$KUEUE_VERSION"
    printf 'module berth.local/e2e-kueue\n\ngo 1.26.0\n' > go.mod
    go get "sigs.k8s.io/kueue/cmd/kueue@$v"
    mkdir -p bin share/crd
    go build -ldflags "$ldflags_strip" -o bin/kueue sigs.k8s.io/kueue/cmd/kueue
    local src
    src="$(module_dir "sigs.k8s.io/kueue@$v")"
    cp "$src"/config/components/crd/bases/*.yaml share/crd/
    cp "$src/config/components/webhook/manifests.yaml" share/webhook-manifests.yaml
    chmod -R u+w share
}

# --- Volcano scheduler: volcano.sh/volcano's go.mod pins its dependencies with replaces, which
# only the main module can apply, so the wrapper copies that replace block (minus local paths).
volcano_module_in_cwd() {
    local v="$VOLCANO_VERSION" src
    src="$(module_dir "volcano.sh/volcano@$v")"
    # Since v1.14 its API types live in a nested module (./staging/src/volcano.sh/apis) that
    # the module zip leaves out; the published volcano.sh/apis at VOLCANO_APIS_VERSION stands in.
    {
        printf 'module berth.local/e2e-volcano\n\ngo 1.25.0\n\nrequire volcano.sh/volcano %s\n\n' "$v"
        sed -n '/^replace (/,/^)/p' "$src/go.mod" | grep -v '=> \./'
        if [[ -n "${VOLCANO_APIS_VERSION:-}" ]]; then
            printf 'replace volcano.sh/apis => volcano.sh/apis %s\n' "$VOLCANO_APIS_VERSION"
        fi
    } > go.mod
}

build_volcano_in_cwd() {
    local v="$VOLCANO_VERSION" src
    src="$(module_dir "volcano.sh/volcano@$v")"
    volcano_module_in_cwd
    go get "volcano.sh/volcano/cmd/scheduler@$v"
    mkdir -p bin share/crd
    go build -ldflags "$ldflags_strip" -o bin/vc-scheduler volcano.sh/volcano/cmd/scheduler
    # The scheduler's cache waits for its informers (NUMA topology, HyperNodes, node shards,
    # colocation configurations): every CRD but the Job controller's (batch, bus).
    cp "$src"/config/crd/volcano/bases/*.yaml share/crd/
    rm -f share/crd/batch.volcano.sh_*.yaml share/crd/bus.volcano.sh_*.yaml
    chmod -R u+w share
}

# --- Volcano's controller manager, run with its queue controller alone: in v1.14 (not v1.10) the
# scheduler allocates only in a Queue whose status says Open, which that controller writes.
# A component of its own (like kubectl) so that adding it left a cached scheduler valid.
build_volcano_controllers_in_cwd() { build_volcano_cmd_in_cwd controller-manager vc-controller-manager; }

# --- Volcano's admission webhook (vc-webhook-manager), for e2e/bench_pace.py's volcano-webhook:
# built on demand (not part of `all`), a component of its own like the controllers.
build_volcano_webhook_in_cwd() { build_volcano_cmd_in_cwd webhook-manager vc-webhook-manager; }

# One command of volcano.sh/volcano (its cmd/$1) built as bin/$2, against the module set up as
# for the scheduler.
build_volcano_cmd_in_cwd() {
    local v="$VOLCANO_VERSION"
    volcano_module_in_cwd
    go get "volcano.sh/volcano/cmd/$1@$v"
    mkdir -p bin
    go build -ldflags "$ldflags_strip" -o "bin/$2" "volcano.sh/volcano/cmd/$1"
}

# --- Helm: a plain module without replaces (the chart in charts/berth is rendered and installed
# with it in the tests). The version is stamped as upstream's Makefile does, so that
# `helm version` tells which release it is.
build_helm_in_cwd() {
    local v="$HELM_VERSION" major="${HELM_VERSION%%.*}"
    printf 'module berth.local/e2e-helm\n\ngo 1.26.0\n' > go.mod
    go get "helm.sh/helm/$major/cmd/helm@$v"
    mkdir -p bin
    go build -ldflags "$ldflags_strip -X helm.sh/helm/$major/internal/version.version=$v" \
        -o bin/helm "helm.sh/helm/$major/cmd/helm"
}

build_one() {
    case "$1" in
        kubernetes) build_cached "kubernetes-$KUBERNETES_VERSION" build_kubernetes_in_cwd ;;
        kubectl) build_cached "kubectl-$KUBERNETES_VERSION" build_kubectl_in_cwd ;;
        etcd) build_cached "etcd-$ETCD_VERSION" build_etcd_in_cwd ;;
        kwok) build_cached "kwok-$KWOK_VERSION" build_kwok_in_cwd ;;
        kueue) build_cached "kueue-$KUEUE_VERSION" build_kueue_in_cwd ;;
        # Volcano = its scheduler and the controller manager that opens its Queues.
        volcano) build_cached "volcano-$VOLCANO_VERSION" build_volcano_in_cwd
                 build_one volcano-controllers ;;
        volcano-controllers)
            build_cached "volcano-controllers-$VOLCANO_VERSION" build_volcano_controllers_in_cwd ;;
        volcano-webhook)
            build_cached "volcano-webhook-$VOLCANO_VERSION" build_volcano_webhook_in_cwd ;;
        helm) build_cached "helm-$HELM_VERSION" build_helm_in_cwd ;;
        core) build_one kubernetes; build_one etcd; build_one kwok ;;
        all) build_one core; build_one kubectl; build_one kueue; build_one volcano; build_one helm ;;
        *) echo "unknown component: $1 (kubernetes|kubectl|etcd|kwok|kueue|volcano|volcano-controllers|volcano-webhook|helm|core|all)" >&2
           return 2 ;;
    esac
}

# Where a component's binaries are (or will be) cached, e.g. to put kubectl on PATH.
bin_dir() {
    local key
    case "$1" in
        kubernetes|kubectl) key="$KUBERNETES_VERSION" ;;
        etcd) key="$ETCD_VERSION" ;;
        kwok) key="$KWOK_VERSION" ;;
        kueue) key="$KUEUE_VERSION" ;;
        volcano|volcano-controllers|volcano-webhook) key="$VOLCANO_VERSION" ;;
        helm) key="$HELM_VERSION" ;;
        *) echo "unknown component: $1" >&2; return 2 ;;
    esac
    echo "$cache/$1-$key/bin"
}

main() {
    if [[ "${1:-}" == "--bin-dir" ]]; then
        bin_dir "${2:?--bin-dir needs a component}"
        return
    fi
    [[ $# -gt 0 ]] || set -- core
    local c
    for c in "$@"; do build_one "$c"; done
}

# "exit" on the same line: bash reads scripts incrementally, so an edit made while a long
# build runs must not be executed as the rest of this file.
main "$@"; exit $?
