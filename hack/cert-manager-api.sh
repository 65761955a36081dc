#!/usr/bin/env bash
# Prints the stand-in for cert-manager that the offline clusterctl repository serves (hack/upstream-tools.sh):
# its namespace and the CRDs of the cert-manager.io kinds that clusterctl and provider components create
# (Issuer, ClusterIssuer, Certificate, CertificateRequest), with schemas that keep every field. No controller runs:
# `clusterctl init` only needs the API to accept its test Issuer and Certificate, and the tests issue the webhook
# serving certificates themselves (docs/testing.md).
set -euo pipefail
cat <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: cert-manager
YAML
crd() { # plural singular kind scope [short name]
  cat <<YAML
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: $1.cert-manager.io
spec:
  group: cert-manager.io
  names:
    plural: $1
    singular: $2
    kind: $3
    listKind: $3List
    categories: [cert-manager]
  scope: $4
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
YAML
}
crd issuers issuer Issuer Namespaced
crd clusterissuers clusterissuer ClusterIssuer Cluster
crd certificates certificate Certificate Namespaced
crd certificaterequests certificaterequest CertificateRequest Namespaced
