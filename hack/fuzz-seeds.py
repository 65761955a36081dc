#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/seed-*) from the project's fixtures:
the cluster templates, the samples, testdata/objects and the `mcm status` fixtures, plus a few hand-written
requests and patches. Rerun it after changing a fixture; files the fuzzer added to a corpus are left alone.

Each target's input format is described on its function in src/fuzzing/ (docs/reliability.md#fuzzing)."""

import glob
import json
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


class Loader(yaml.SafeLoader):
    """YAML without timestamps: the fixtures' times must stay strings, as Kubernetes writes them."""


Loader.yaml_implicit_resolvers = {
    key: [r for r in resolvers if r[0] != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in Loader.yaml_implicit_resolvers.items()
}

# Values for the templates' variables without a default (clusterctl would ask for them).
VARIABLES = {
    "AWS_AMI_ID": "ami-0123456789abcdef0", "AWS_REGION": "eu-west-1", "AWS_ZONE": "eu-west-1a",
    "AWS_SECURITY_GROUP_ID": "sg-0123", "AWS_SUBNET_ID": "subnet-0123", "AZURE_LOCATION": "westeurope",
    "AZURE_RESOURCE_GROUP": "rg", "AZURE_SUBNET_NAME": "nodes", "AZURE_VNET_NAME": "vnet",
    "GCP_REGION": "europe-west1", "GCP_ZONE": "europe-west1-b", "KUBERNETES_VERSION": "v1.34.1",
}


def substitute(text):
    def value(match):
        name, default = match.group(1), match.group(3)
        return VARIABLES.get(name, default if default is not None else "seed")
    return re.sub(r"\$\{([A-Z0-9_]+)(:=([^}]*))?\}", value, text)


def documents(pattern):
    for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
        with open(path) as f:
            docs = [d for d in yaml.load_all(substitute(f.read()), Loader=Loader) if isinstance(d, dict)]
        yield os.path.relpath(path, ROOT), docs


FIXTURES = ["templates/*.yaml", "config/samples/*.yaml", "testdata/objects/*.yaml",
            "tests/integration/status/fixtures/*.yaml"]


def all_documents():
    for pattern in FIXTURES:
        yield from documents(pattern)


def group(doc):
    return str(doc.get("apiVersion", "")).split("/")[0]


# At most this many seeds of one kind per target, so that the corpora stay small (tens of files).
PER_KIND = 2
taken = {}


def take(target, key):
    """Whether another seed of `key` fits in `target`'s corpus."""
    count = taken.get((target, key), 0)
    taken[(target, key)] = count + 1
    return count < PER_KIND


def write(target, name, text):
    directory = os.path.join(CORPUS, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "seed-" + name), "w") as f:
        f.write(text)


def write_bytes(target, name, data):
    with open(os.path.join(CORPUS, target, "seed-" + name), "wb") as f:
        f.write(data)


# The protocol buffers wire format, enough for the out-of-tree driver's messages (proto/mcm/driver/v1/driver.proto).
def varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, value):
    """A length-delimited field (strings, bytes, messages, map entries)."""
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def entry(number, key, value):
    return field(number, field(1, key) + field(2, value))


def grpc_seeds():
    """`grpc` inputs of provider_spec: requests as `mcm run` sends them to an out-of-tree driver, and answers."""
    specs = {
        "AWS": {"ami": "ami-0123", "machineType": "m5.large", "region": "eu-west-1", "networkInterfaces": [
            {"subnetID": "subnet-1", "securityGroupIDs": ["sg-1"]}], "tags": {"kubernetes.io/cluster/c": "1",
            "kubernetes.io/role/node": "1"}},
        "InMemory": {"bootSeconds": 1},
    }
    for provider, spec in specs.items():
        machine = (field(1, "m-1") + field(2, "ns") + field(3, "aws:///eu-west-1a/i-0123") + entry(4, "a", "b")
                   + field(5, compact({"labels": {"x": "y"}})))
        machine_class = field(1, "class") + field(2, provider) + field(3, compact(spec)) + field(4, compact(
            {"capacity": {"cpu": "2"}, "instanceType": "m5.large", "region": "eu-west-1", "zone": "eu-west-1a"}))
        request = field(1, machine) + field(2, machine_class) + entry(3, "userData", b"#!/bin/sh") + field(4, "s")
        write_bytes("provider_spec", f"grpc-machine-request-{provider.lower()}", b"grpc\n" + request)
    write_bytes("provider_spec", "grpc-list-request", b"grpc\n" + field(1, field(2, "AWS") + field(3, "{}"))
                + entry(2, "k", b"v"))
    write_bytes("provider_spec", "grpc-volumes-request", b"grpc\n" + field(1, compact(
        {"awsElasticBlockStore": {"volumeID": "vol-1"}})) + field(1, compact({"csi": {"driver": "d", "volumeHandle": "h"}})))
    write_bytes("provider_spec", "grpc-create-response", b"grpc\n" + field(1, "aws:///z/i-1") + field(2, "n")
                + field(3, "st") + field(4, field(1, "InternalIP") + field(2, "10.0.0.1")))
    write_bytes("provider_spec", "grpc-status-trailer", b"grpc\n\x06ResourceExhausted")


def compact(value):
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def slug(path, index=None):
    name = re.sub(r"[^a-z0-9]+", "-", os.path.splitext(path)[0].lower()).strip("-")
    return name if index is None else f"{name}-{index}"


def provider_specs():
    drivers = {"AWS": "aws", "Azure": "azure", "GCP": "gcp", "InMemory": "inmemory"}
    seen = set()

    def walk(node, path):
        if isinstance(node, dict):
            if node.get("provider") in drivers and isinstance(node.get("providerSpec"), dict):
                text = drivers[node["provider"]] + "\n" + compact(node["providerSpec"])
                if text not in seen:
                    seen.add(text)
                    write("provider_spec", f"{slug(path)}-{len(seen)}", text)
            for child in node.values():
                walk(child, path)
        elif isinstance(node, list):
            for child in node:
                walk(child, path)

    for path, docs in all_documents():
        walk(docs, path)
    for name, text in {
        "aws-providerid": "aws\naws:///eu-west-1a/i-0123456789abcdef0",
        "aws-providerid-region": "aws\naws:///eu-west-1/i-0123456789abcdef0",
        "azure-providerid": "azure\nazure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/"
                            "virtualMachines/vm-1",
        "azure-providerid-location": "azure\nazure:///westeurope/vm-1",
        "gcp-providerid": "gcp\ngce://project/europe-west1-b/machine-1",
        "gcp-providerid-gardener": "gcp\ngce:///project/europe-west1-b/machine-1",
        "inmemory-null": "inmemory\nnull",
    }.items():
        write("provider_spec", name, text)
    grpc_seeds()


def convert():
    count = 0
    for path, docs in all_documents():
        for i, doc in enumerate(docs):
            side = {"machine.sapcloud.io": "hub", "cluster.x-k8s.io": "capi"}.get(group(doc))
            kind = {"MachineDeployment": "deployment", "MachineSet": "machineset"}.get(doc.get("kind"))
            if doc.get("kind") == "Machine" and side == "hub":
                kind = "machine"
            if doc.get("kind") == "MCMMachine":
                side, kind = "capi", "machine"
            if side is None or kind is None or not take("convert_roundtrip", (side, kind, doc.get("kind"))):
                continue
            count += 1
            write("convert_roundtrip", slug(path, i), f"{side} {kind}\n{compact(doc)}")
            spec = doc.get("spec") or {}
            if isinstance(spec.get("template"), dict):
                write("convert_roundtrip", slug(path, i) + "-template", f"{side} template\n{compact(spec['template'])}")
            status = doc.get("status")
            if isinstance(status, dict) and kind in ("deployment", "machineset"):
                what = "deployment-status" if kind == "deployment" else "set-status"
                write("convert_roundtrip", slug(path, i) + "-status", f"{side} {what}\n{compact(status)}")
    return count


def migrate():
    for path, docs in all_documents():
        kinds = {d.get("kind") for d in docs}
        if kinds & {"MachineDeployment", "MachineSet", "Machine"} and not path.startswith("templates/"):
            write("migrate_plan", slug(path), compact(docs))


# The resource of a kind, as `group/version/resource` (`version/resource` for the core group).
def resource(doc):
    api_version, kind = str(doc.get("apiVersion", "")), str(doc.get("kind", ""))
    plural = kind.lower() + ("es" if kind.endswith(("s", "ss")) else "s")
    return f"{api_version}/{plural}"


def field_validation():
    for path, docs in all_documents():
        for i, doc in enumerate(docs):
            if not doc.get("kind") or not doc.get("apiVersion") or not take("field_validation", resource(doc)):
                continue
            mode = ["", " Strict", " Ignore"][i % 3]
            write("field_validation", slug(path, i), f"json {resource(doc)}{mode}\n{compact(doc)}")
            if i == 0 and take("field_validation", "yaml"):
                write("field_validation", slug(path, i) + "-yaml",
                      f"yaml {resource(doc)}\n" + yaml.safe_dump(doc, sort_keys=False))
    write("field_validation", "duplicates",
          'json apps/v1/deployments Strict\n{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d",'
          '"name":"e"},"spec":{"replicas":1,"replicas":2,"bogus":true}}')


def patches():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fuzz", "namespace": "default",
           "labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "i", "ports": [
               {"containerPort": 80}], "env": [{"name": "A", "value": "1"}]}], "tolerations": [{"key": "k"}]}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "fuzz", "namespace":
                  "default"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {
                      "metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fuzz", "finalizers": ["f"]},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    md = {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment", "metadata": {"name": "fuzz",
          "namespace": "default", "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion":
          "machine.sapcloud.io/v1alpha1", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
          "spec": {"replicas": 2, "selector": {"matchLabels": {"name": "w"}}, "template": {"metadata": {"labels":
          {"name": "w"}}, "spec": {"class": {"kind": "MachineClass", "name": "small"}}}}}
    cases = {
        "merge-pod": ("merge v1/pods", pod, {"metadata": {"labels": {"app": None, "b": "c"}}, "spec": {"x": 1}}),
        "json-pod": ("json v1/pods", pod, [{"op": "add", "path": "/metadata/labels/b", "value": "c"},
                                          {"op": "test", "path": "/metadata/finalizers", "value": None},
                                          {"op": "remove", "path": "/spec/tolerations/0"}]),
        "strategic-pod": ("strategic v1/pods", pod, {"spec": {"containers": [{"name": "c", "image": "j", "env": [
            {"name": "B", "value": "2"}, {"name": "A", "$patch": "delete"}]}], "$setElementOrder/containers": [
            {"name": "c"}]}}),
        "strategic-deployment": ("strategic apps/v1/deployments Strict", deployment, {"spec": {"template": {
            "spec": {"containers": [{"name": "d", "image": "k"}]}}, "$retainKeys": ["template"]}}),
        "strategic-node": ("strategic v1/nodes", node, {"metadata": {"$deleteFromPrimitiveList/finalizers":
            ["f"]}, "spec": {"taints": [{"key": "k", "$patch": "delete"}]}, "status": {"conditions": [
            {"type": "Ready", "status": "False"}]}}),
        "strategic-replace": ("strategic v1/pods Ignore", pod, {"spec": {"$patch": "replace", "containers": []}}),
        "apply-md": ("apply machine.sapcloud.io/v1alpha1/machinedeployments", md,
                     "apiVersion: machine.sapcloud.io/v1alpha1\nkind: MachineDeployment\nmetadata:\n  name: fuzz\n"
                     "spec:\n  replicas: 3\n  paused: true\n"),
        "merge-md": ("merge machine.sapcloud.io/v1alpha1/machinedeployments Warn", md, {"spec": {"replicas": 5,
                     "bogus": 1}, "metadata": {"labelz": {}}}),
        "json-md": ("json machine.sapcloud.io/v1alpha1/machinedeployments", md,
                    [{"op": "replace", "path": "/spec/replicas", "value": 0},
                     {"op": "move", "from": "/spec/selector", "path": "/spec/sel"}]),
        "apply-deployment": ("apply apps/v1/deployments", deployment,
                             '{"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 4}}'),
    }
    for name, (line, current, patch) in cases.items():
        text = patch if isinstance(patch, str) else compact(patch)
        write("apiserver_patch", name, f"{line}\n{compact(current)}\n---\n{text}")


def requests():
    cases = [
        "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&fieldSelector="
        "spec.nodeName%3Dn1%2Cstatus.phase%21%3DRunning&watch=true&resourceVersion=12&allowWatchBookmarks=true"
        "&timeoutSeconds=30&sendInitialEvents=true",
        "/apis/machine.sapcloud.io/v1alpha1/namespaces/ns/machines?labelSelector=%21name%2Cx+notin+%28y%29"
        "&limit=5&continue=abc&fieldValidation=Strict",
        "/apis/apps/v1/deployments?fieldSelector=metadata.name%3D%3Dd%2Cmetadata.namespace%21%3Dkube-system"
        "&includeObject=Metadata&resourceVersionMatch=NotOlderThan",
        "/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/machinedeployments/md/scale?dryRun=All&fieldManager=m"
        "&force=true&propagationPolicy=Foreground",
        "/api/v1/nodes?labelSelector=node.kubernetes.io%2Finstance-type%3Dm5.large%2Cgen%3E3%2Cage%3C10",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases?watch=1&resourceVersion=0",
        "/openapi/v3/apis/apps/v1",
        "/healthz/etcd",
        "a=b,c!=d,e in (x,y),f notin (z),g,!h,i==j,k>5,l<3",
        "metadata.name=foo,spec.nodeName!=bar,status.phase==Running,x=a\\,b\\=c\\\\",
        '{"matchLabels":{"a":"b"},"matchExpressions":[{"key":"c","operator":"In","values":["y","x","x"]},'
        '{"key":"d","operator":"DoesNotExist"}]}',
        '{"matchExpressions":[{"key":"example.com/role","operator":"NotIn","values":["a"]},'
        '{"key":"e","operator":"Exists"}]}',
    ]
    for i, text in enumerate(cases):
        write("apiserver_request", f"{i:02}", text)


def main():
    provider_specs()
    convert()
    migrate()
    field_validation()
    patches()
    requests()
    for target in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, target))
        size = sum(os.path.getsize(os.path.join(CORPUS, target, f)) for f in files)
        print(f"{target}: {len(files)} files, {size // 1024} KiB", file=sys.stderr)


if __name__ == "__main__":
    main()
