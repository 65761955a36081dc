#!/usr/bin/env bash
# Writes the clusterctl release assets and a local clusterctl repository:
#   OUT/infrastructure-components.yaml   `kubectl kustomize config/default`, unchanged
#   OUT/metadata.yaml                    clusterctl-metadata.yaml
#   OUT/machineclass-crd.yaml            `kubectl kustomize config/machineclass`: MCM's MachineClass CRD, not a
#                                        component (`kubectl create -f` it where Gardener's MCM does not run)
#   OUT/cluster-template*.yaml           templates/
#   OUT/repository/infrastructure-mcm/vVERSION/   the three above, as clusterctl's local repository layout
#   OUT/clusterctl.yaml                  registers that repository: clusterctl init --config OUT/clusterctl.yaml --infrastructure mcm
# Usage: hack/release-manifests.sh [OUT]   (default: out)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-out}"
version="v$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
tag="$(sed -n 's/^ *newTag: *//p' config/default/kustomization.yaml)"
if [ "$tag" != "$version" ]; then
  echo "release-manifests: config/default/kustomization.yaml pins image tag $tag, the crate is $version" >&2
  exit 1
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
kubectl kustomize config/default > "$out/infrastructure-components.yaml"
cp clusterctl-metadata.yaml "$out/metadata.yaml"
kubectl kustomize config/machineclass > "$out/machineclass-crd.yaml"
cp templates/cluster-template*.yaml "$out/"
repo="$out/repository/infrastructure-mcm/$version"
mkdir -p "$repo"
cp "$out/infrastructure-components.yaml" "$out/metadata.yaml" "$out"/cluster-template*.yaml "$repo/"
cat > "$out/clusterctl.yaml" <<YAML
# clusterctl configuration registering the local repository of cluster-api-provider-mcm $version.
#   clusterctl init --config $out/clusterctl.yaml --infrastructure mcm
providers:
- name: mcm
  url: $repo/infrastructure-components.yaml
  type: InfrastructureProvider
YAML
echo "release-manifests: wrote $out (version $version)"
