//go:build tools

// Package tools names the programs hack/upstream-tools.sh builds from this module, so that `go mod tidy` keeps their
// dependencies in go.sum: a real kube-apiserver, the etcd its release supports, and kube-controller-manager (for
// garbage collection, namespaces and disruption budgets, which the embedded API server does itself).
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
