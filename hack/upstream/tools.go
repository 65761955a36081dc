//go:build tools

// Package tools names the upstream programs hack/upstream-tools.sh builds, so that `go mod tidy` keeps their
// dependencies in go.sum. Nothing here is compiled into cluster-api-provider-mcm.
package tools

import (
	_ "sigs.k8s.io/cluster-api/cmd/clusterctl"
	_ "sigs.k8s.io/cluster-api/core"
)
