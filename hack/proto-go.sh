#!/usr/bin/env bash
# Regenerates adapters/mcm-go/driverpb/ (Go code of the out-of-tree driver protocol) from
# proto/mcm/driver/v1/driver.proto. The generated files are committed: building and testing the adapters do not
# need this script; run it after every edit of the proto and commit the result.
#
# Needs:
#   protoc               Debian/Ubuntu: apt-get install protobuf-compiler (any protoc >= 3.15)
#   protoc-gen-go        google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION
#   protoc-gen-go-grpc   google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION
# The two plugins are installed with `go install` at the versions below into target/adapters/go/bin (not on
# PATH, so the versions are always these) when missing there.
# Usage: hack/proto-go.sh   (needs go and protoc)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.0

command -v protoc >/dev/null 2>&1 || { echo "proto-go: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
export GOMODCACHE="$root/target/adapters/go/mod" GOCACHE="$root/target/adapters/go/build" GOTOOLCHAIN=local CGO_ENABLED=0
bin="$root/target/adapters/go/bin"
mkdir -p "$bin"
# A stamp per plugin version, so a version bump here reinstalls it.
install_plugin() { # name package version
  if [ ! -x "$bin/$1" ] || [ "$(cat "$bin/.$1.version" 2>/dev/null)" != "$3" ]; then
    echo "proto-go: installing $2@$3"
    GOBIN="$bin" go install "$2@$3"
    echo "$3" >"$bin/.$1.version"
  fi
}
install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

out="adapters/mcm-go/driverpb"
mkdir -p "$out"
rm -f "$out"/*.pb.go
# paths=source_relative puts driver.pb.go next to the proto's path; generate in a scratch dir and move the
# files into the package directory that go_package names.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
PATH="$bin:$PATH" protoc --proto_path=proto \
  --go_out="$scratch" --go_opt=paths=source_relative \
  --go-grpc_out="$scratch" --go-grpc_opt=paths=source_relative \
  mcm/driver/v1/driver.proto
mv "$scratch"/mcm/driver/v1/*.pb.go "$out/"
echo "proto-go: $(protoc --version), protoc-gen-go $PROTOC_GEN_GO_VERSION, protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC_VERSION -> $out"
ls "$out"
