#!/usr/bin/env bash
# Builds the upstream programs the integration tests drive, from the Go module proxy, at the versions that
# hack/upstream/go.mod and hack/kube/go.mod pin (the only files that pin them), and lays out an offline clusterctl
# repository:
#
#   target/upstream/bin/clusterctl              sigs.k8s.io/cluster-api/cmd/clusterctl
#   target/upstream/bin/capi-manager            sigs.k8s.io/cluster-api/core (CAPI core's controller manager)
#   target/upstream/bin/kube-apiserver          k8s.io/kubernetes/cmd/kube-apiserver     (MCM_TEST_APISERVER=kube,
#   target/upstream/bin/kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager       docs/testing.md)
#   target/upstream/bin/etcd                    go.etcd.io/etcd/server/v3, the version that Kubernetes release requires
#   target/upstream/repository/cluster-api/vX/  core-components.yaml (`kubectl kustomize core/config/default` of the
#                                               module we built from) and metadata.yaml
#   target/upstream/repository/cert-manager/vY/ cert-manager.yaml: cert-manager's API only (see docs/testing.md)
#   target/upstream/versions.env                the versions above, for the tests
#
# Go's module and build caches live under target/upstream/go, so a second run (and `cargo clean`) behave as for
# the Rust build: nothing is rebuilt when hack/upstream/ has not changed.
# Usage: hack/upstream-tools.sh        (needs go and kubectl on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
out="$root/target/upstream"
mkdir -p "$out/bin"
if ! command -v go >/dev/null 2>&1 || ! command -v kubectl >/dev/null 2>&1; then
  # Outside CI the suite still runs; tests/integration/upstream says loudly that it skipped.
  echo "upstream-tools: WARNING: go and kubectl are needed to build the upstream tools; the upstream tests will be SKIPPED" >&2
  [ "${CI:-}" = "true" ] && exit 1
  exit 0
fi

export GOMODCACHE="$out/go/mod" GOCACHE="$out/go/build" GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0

mod_version() { (cd "${2:-hack/upstream}" && go list -m -f '{{.Version}}' "$1"); }
mod_dir() { (cd hack/upstream && go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'); }

start=$(date +%s)
capi_version="$(mod_version sigs.k8s.io/cluster-api)"
# cert-manager is not built: the tests issue certificates themselves. The version is the one this clusterctl
# installs by default, so `clusterctl upgrade plan` finds nothing to upgrade.
capi_dir="$(mod_dir "sigs.k8s.io/cluster-api@$capi_version")"
cert_manager_version="$(sed -n 's/^[[:space:]]*CertManagerDefaultVersion = "\(.*\)"$/\1/p' \
  "$capi_dir/cmd/clusterctl/client/config/cert_manager_client.go")"
if [ -z "$cert_manager_version" ]; then
  echo "upstream-tools: cannot read clusterctl's default cert-manager version" >&2
  exit 1
fi

stamp="$out/bin/.stamp"
want="$(cat hack/upstream/go.mod hack/upstream/go.sum hack/upstream/tools.go hack/upstream-tools.sh | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$out/bin/clusterctl" ] && [ -x "$out/bin/capi-manager" ]; then
  echo "upstream-tools: binaries up to date (cluster-api $capi_version)"
else
  ldflags="-X sigs.k8s.io/cluster-api/version.gitVersion=$capi_version"
  major="${capi_version#v}"; minor="${major#*.}"; major="${major%%.*}"; minor="${minor%%.*}"
  ldflags="$ldflags -X sigs.k8s.io/cluster-api/version.gitMajor=$major -X sigs.k8s.io/cluster-api/version.gitMinor=$minor"
  echo "upstream-tools: building clusterctl and the core manager of cluster-api $capi_version"
  (cd hack/upstream &&
    go build -trimpath -ldflags "$ldflags" -o "$out/bin/clusterctl" sigs.k8s.io/cluster-api/cmd/clusterctl &&
    go build -trimpath -ldflags "$ldflags" -o "$out/bin/capi-manager" sigs.k8s.io/cluster-api/core)
  echo "$want" > "$stamp"
fi

# The offline clusterctl repository (clusterctl's local layout: <provider>/<version>/<file>).
repo="$out/repository"
rm -rf "$repo"
mkdir -p "$repo/cluster-api/$capi_version" "$repo/cert-manager/$cert_manager_version"
kubectl kustomize "$capi_dir/core/config/default" > "$repo/cluster-api/$capi_version/core-components.yaml"
cp "$capi_dir/metadata.yaml" "$repo/cluster-api/$capi_version/metadata.yaml"
hack/cert-manager-api.sh > "$repo/cert-manager/$cert_manager_version/cert-manager.yaml"

# A real kube-apiserver, its controller manager and etcd. Kubernetes' own go.mod replaces its staging modules
# (k8s.io/api, …) with local paths, so hack/kube/go.mod requires each at the matching v0.x release.
kube_version="$(mod_version k8s.io/kubernetes hack/kube)"
etcd_version="$(mod_version go.etcd.io/etcd/server/v3 hack/kube)"
kube_stamp="$out/bin/.kube-stamp"
kube_want="$(cat hack/kube/go.mod hack/kube/go.sum hack/kube/tools.go hack/upstream-tools.sh | sha256sum | cut -d' ' -f1)"
if [ -f "$kube_stamp" ] && [ "$(cat "$kube_stamp")" = "$kube_want" ] &&
  [ -x "$out/bin/kube-apiserver" ] && [ -x "$out/bin/kube-controller-manager" ] && [ -x "$out/bin/etcd" ]; then
  echo "upstream-tools: binaries up to date (kubernetes $kube_version, etcd $etcd_version)"
else
  kube_start=$(date +%s)
  major="${kube_version#v}"; minor="${major#*.}"; major="${major%%.*}"; minor="${minor%%.*}"
  # What `kubectl version` and discovery's /version report (a plain `go build` says v0.0.0-master).
  kube_ldflags=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kube_ldflags="$kube_ldflags -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    kube_ldflags="$kube_ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "upstream-tools: building kube-apiserver and kube-controller-manager $kube_version and etcd $etcd_version"
  (cd hack/kube &&
    go build -trimpath -ldflags "$kube_ldflags" -o "$out/bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver &&
    go build -trimpath -ldflags "$kube_ldflags" -o "$out/bin/kube-controller-manager" \
      k8s.io/kubernetes/cmd/kube-controller-manager &&
    go build -trimpath -o "$out/bin/etcd" go.etcd.io/etcd/server/v3)
  echo "$kube_want" > "$kube_stamp"
  echo "upstream-tools: kubernetes binaries built in $(( $(date +%s) - kube_start )) s"
fi

cat > "$out/versions.env" <<ENV
CAPI_VERSION=$capi_version
CERT_MANAGER_VERSION=$cert_manager_version
KUBERNETES_VERSION=$kube_version
ETCD_VERSION=$etcd_version
ENV
echo "upstream-tools: ready in $(( $(date +%s) - start )) s: $out/bin, $repo"
