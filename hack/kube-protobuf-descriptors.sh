#!/usr/bin/env bash
# Regenerates third_party/kubernetes-protobuf/ from Kubernetes' API modules at the versions hack/kube/go.mod pins:
#
#   descriptors.binpb  a FileDescriptorSet (no source info) of every generated.proto in k8s.io/api,
#                      k8s.io/apimachinery, k8s.io/apiextensions-apiserver and k8s.io/kube-aggregator, with imports
#   json-fields.tsv    per message field, where its JSON form differs from the default the decoder assumes
#                      (JSON name = proto name, zero scalars omitted): taken from the Go struct tags, because the
#                      .proto files do not say which fields Go inlines (`json:""`), renames (`$ref`,
#                      `x-kubernetes-*`) or writes even when zero (pointers, no `omitempty`); named slice types
#                      (`type Verbs []string`), which Go writes as a plain list, are listed as `list` rows
#   VERSIONS           the module versions used
#   LICENSE            the modules' licence (Apache-2.0)
#
# Only needed when bumping Kubernetes; building and testing use the committed files.
# Usage: hack/kube-protobuf-descriptors.sh   (needs go and protoc: apt-get install protobuf-compiler)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
out="$root/third_party/kubernetes-protobuf"
export GOMODCACHE="$root/target/upstream/go/mod" GOFLAGS=-mod=readonly GOTOOLCHAIN=local
include="$(mktemp -d)"
trap 'rm -rf "$include"' EXIT
mkdir -p "$out" "$include/k8s.io"
: >"$out/VERSIONS"
dirs=()
for module in api apimachinery apiextensions-apiserver kube-aggregator; do
  # The version after go.mod's replace directives, if any (the staging modules are replaced).
  version=$(cd hack/kube && go list -m -f '{{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' "k8s.io/$module")
  dir=$(cd hack/kube && go mod download -json "k8s.io/$module@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir" ] || { echo "k8s.io/$module@$version: not in $GOMODCACHE" >&2; exit 1; }
  ln -s "$dir" "$include/k8s.io/$module"
  dirs+=("$dir")
  echo "k8s.io/$module $version" >>"$out/VERSIONS"
done
install -m 644 "${dirs[0]}/LICENSE" "$out/LICENSE"
# Relative to the include root, as the imports name them; test-only API groups left out.
mapfile -t protos < <(cd "$include" && find -L k8s.io -name generated.proto -not -path '*testapigroup*' | sort)
protoc --proto_path="$include" --include_imports --descriptor_set_out="$out/descriptors.binpb" "${protos[@]}" 2>&1 \
  | { grep -v 'warning: Import .* is unused' || true; } >&2

# Go struct tags of the types each generated.proto is generated from.
{
  for proto in "${protos[@]}"; do
    dir="$include/$(dirname "$proto")"
    package=$(sed -n 's/^package \(.*\);$/\1/p' "$dir/generated.proto")
    find -L "$dir" -maxdepth 1 -name '*.go' -not -name '*_test.go' -not -name 'zz_*' -not -name 'generated.pb.go' \
      | sort | xargs awk -v package="$package" '
        /^type [A-Za-z0-9_]+ struct \{/ { message = $2; next }
        /^type [A-Za-z0-9_]+ \[\][A-Za-z0-9_.]+$/ { print package "." $2 "\t\t\tlist"; next }
        /^\}/ { message = ""; next }
        message != "" && /protobuf:"/ && /json:"/ {
          match($0, /protobuf:"[^"]*"/); tag = substr($0, RSTART, RLENGTH)
          if (!match(tag, /name=[A-Za-z0-9_]+/)) next
          field = substr(tag, RSTART + 5, RLENGTH - 5)
          match($0, /json:"[^"]*"/); json = substr($0, RSTART + 6, RLENGTH - 7)
          name = json; sub(/,.*/, "", name)
          if (name == "-") next
          # Go writes a zero scalar when it is a pointer or has no omitempty.
          # (Only scalars matter: a message field is written whenever it is set.)
          scalar = tag ~ /"(varint|fixed)/ || tag ~ /casttype=/ || $2 ~ /^\*?(string|bool|u?int(32|64)?|float64|\[\]byte)$/
          keep = (scalar && ($2 ~ /^\*/ || json !~ /omitempty/)) ? "keep" : ""
          if (name == "") keep = "inline"
          if (name != field || keep != "") print package "." message "\t" field "\t" name "\t" keep
        }'
  done
} | sort -u >"$out/json-fields.tsv"
ls -l "$out"
