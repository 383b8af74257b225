#!/usr/bin/env bash
# Runs the e2e suite on a kind cluster (hosts with Docker): creates the cluster, installs kwok
# in it to manage the fake GPU nodes, builds and loads Berth's image, deploys config/, then
# runs e2e/tests with BERTH_E2E_KUBECONFIG pointing at the kind cluster.
#
# usage: e2e/kind/run.sh [KUSTOMIZE_DIR] [-- extra pytest args]
#   (default: config/overlays/standalone)
#   KEEP_CLUSTER=1 keeps the kind cluster afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
source e2e/versions.env

overlay="${1:-config/overlays/standalone}"; [[ $# -gt 0 ]] && shift
[[ "${1:-}" == "--" ]] && shift
for tool in docker kind kubectl; do
    command -v "$tool" >/dev/null || { echo "e2e/kind: '$tool' is required on PATH" >&2; exit 1; }
done
[[ -d "$overlay" ]] || { echo "e2e/kind: no kustomize dir $overlay" >&2; exit 1; }

name=berth-e2e
kubeconfig="$(mktemp -d)/kubeconfig"
cleanup() { [[ -n "${KEEP_CLUSTER:-}" ]] || kind delete cluster --name "$name"; }
trap cleanup EXIT

kind create cluster --name "$name" --config e2e/kind/cluster.yaml --kubeconfig "$kubeconfig"
export KUBECONFIG="$kubeconfig"

# kwok controller in the cluster, from its release manifests, at the pinned version; it
# manages only nodes annotated kwok.x-k8s.io/node=fake, which is what the suite creates.
kwok_url="https://github.com/kubernetes-sigs/kwok/releases/download/$KWOK_VERSION"
kubectl apply -f "$kwok_url/kwok.yaml"
kubectl apply -f "$kwok_url/stage-fast.yaml"
kubectl -n kube-system rollout status deployment/kwok-controller --timeout=180s

# Berth's image, loaded into the kind node so no registry is needed.
# The manifests name the image "berth:latest" (config/base images:); imagePullPolicy is
# IfNotPresent, so the loaded image is used.
docker build -t berth:latest .
kind load docker-image berth:latest --name "$name"
kubectl apply -k "$overlay"
kubectl -n berth-system rollout status deployment/berth --timeout=180s

BERTH_E2E_KUBECONFIG="$kubeconfig" python3 -m pytest -q -m e2e e2e/tests "$@"
