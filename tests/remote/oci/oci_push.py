#!/usr/bin/env python3
"""Test helper: puts a model into a registry (through its HTTP API: monolithic blob upload,
then manifest PUT; OCI distribution-spec "Pushing blobs" / "Pushing manifests"), an OCI image
layout or an Ollama store, in the layer flavours registries hold models in.

  oci_push.py --flavour ollama|docker|modelpack [--names] [--order 3,1,2] [--index] [--oci-manifest]
              [--companion MEDIATYPE=FILE ...] (--registry HOST:PORT --repo R --tag T
              [--token TOKEN | --basic USER:PASS] | --layout DIR --tag T | --store DIR --name R --tag T)
              WEIGHT [WEIGHT ...]

--names annotates every weight layer with its file name (org.cncf.model.filepath);
--order gives the layer order as 1-based positions of the WEIGHT arguments; --oci-manifest sends
an Ollama model as an OCI image manifest (Ollama's registry sends Docker v2 schema 2, which
skopeo refuses for its layer types). Prints the manifest
digest. Only 127.0.0.1 registries are ever contacted (tests' rule).
"""
import argparse
import hashlib
import json
import os
import sys
import urllib.request

FLAVOURS = {
    "ollama": {
        "manifest": "application/vnd.docker.distribution.manifest.v2+json",
        "config": "application/vnd.docker.container.image.v1+json",
        "weight": "application/vnd.ollama.image.model",
    },
    "docker": {
        "manifest": "application/vnd.oci.image.manifest.v1+json",
        "config": "application/vnd.docker.ai.model.config.v0.1+json",
        "weight": "application/vnd.docker.ai.gguf.v3",
    },
    "modelpack": {
        "manifest": "application/vnd.oci.image.manifest.v1+json",
        "config": "application/vnd.cncf.model.config.v1+json",
        "weight": "application/vnd.cncf.model.weight.v1.raw",
        "artifact": "application/vnd.cncf.model.manifest.v1+json",
    },
}


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Registry:
    def __init__(self, host, repo, auth):
        if not (host.startswith("127.") or host.startswith("[::1]") or host.startswith("localhost")):
            sys.exit("oci_push.py: only loopback registries (%s)" % host)
        self.base = "http://" + host
        self.repo = repo
        self.auth = auth

    def request(self, method, url, data=None, headers=None):
        req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
        if self.auth:
            req.add_header("Authorization", self.auth)
        return urllib.request.urlopen(req, timeout=30)

    def blob(self, data):
        d = digest(data)
        start = self.request("POST", "%s/v2/%s/blobs/uploads/" % (self.base, self.repo), b"")
        loc = start.headers["Location"]
        if loc.startswith("/"):
            loc = self.base + loc
        loc += ("&" if "?" in loc else "?") + "digest=" + d
        self.request("PUT", loc, data, {"Content-Type": "application/octet-stream"})
        return d

    def manifest(self, ref, data, media_type):
        self.request("PUT", "%s/v2/%s/manifests/%s" % (self.base, self.repo, ref), data, {"Content-Type": media_type})


class Layout:
    def __init__(self, root, store):
        self.root = root
        self.store = store
        os.makedirs(self.blob_dir(), exist_ok=True)

    def blob_dir(self):
        return os.path.join(self.root, "blobs") if self.store else os.path.join(self.root, "blobs", "sha256")

    def blob(self, data):
        d = digest(data)
        name = ("sha256-" + d[7:]) if self.store else d[7:]
        with open(os.path.join(self.blob_dir(), name), "wb") as f:
            f.write(data)
        return d


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--flavour", required=True, choices=sorted(FLAVOURS))
    p.add_argument("--names", action="store_true")
    p.add_argument("--order")
    p.add_argument("--index", action="store_true")
    p.add_argument("--oci-manifest", action="store_true")
    p.add_argument("--companion", action="append", default=[])
    p.add_argument("--registry")
    p.add_argument("--repo")
    p.add_argument("--tag", default="latest")
    p.add_argument("--token")
    p.add_argument("--basic")
    p.add_argument("--layout")
    p.add_argument("--store")
    p.add_argument("--name")
    p.add_argument("--store-registry", default="registry.ollama.ai")
    p.add_argument("--created", help="the manifest's org.opencontainers.image.created annotation")
    p.add_argument("weights", nargs="+")
    a = p.parse_args()
    f = dict(FLAVOURS[a.flavour])
    if a.oci_manifest:
        f["manifest"] = "application/vnd.oci.image.manifest.v1+json"

    if a.registry:
        import base64
        auth = ("Bearer " + a.token) if a.token else (
            "Basic " + base64.b64encode(a.basic.encode()).decode()) if a.basic else None
        sink = Registry(a.registry, a.repo, auth)
    else:
        sink = Layout(a.layout or a.store, store=bool(a.store))

    order = [int(i) - 1 for i in a.order.split(",")] if a.order else list(range(len(a.weights)))
    layers = []
    for i in order:
        path = a.weights[i]
        with open(path, "rb") as fh:
            data = fh.read()
        layer = {"mediaType": f["weight"], "digest": sink.blob(data), "size": len(data)}
        if a.names:
            layer["annotations"] = {"org.cncf.model.filepath": os.path.basename(path)}
        layers.append(layer)
    for c in a.companion:
        mt, path = c.split("=", 1)
        with open(path, "rb") as fh:
            data = fh.read()
        layers.append({"mediaType": mt, "digest": sink.blob(data), "size": len(data)})
    config = json.dumps({"format": "gguf", "flavour": a.flavour}).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": f["manifest"],
        "config": {"mediaType": f["config"], "digest": sink.blob(config), "size": len(config)},
        "layers": layers,
    }
    if "artifact" in f:
        manifest["artifactType"] = f["artifact"]
    if a.created:
        manifest["annotations"] = {"org.opencontainers.image.created": a.created}
    body = json.dumps(manifest, indent=1).encode()
    md = digest(body)
    top, top_type = body, f["manifest"]
    if a.index:
        # An index with an image for a platform first, then the model manifest.
        img_cfg = b'{"architecture":"amd64","os":"linux"}'
        img = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                          "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                     "digest": sink.blob(img_cfg), "size": len(img_cfg)},
                          "layers": []}).encode()
        entries = [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(img),
                    "size": len(img), "platform": {"architecture": "amd64", "os": "linux"}},
                   {"mediaType": f["manifest"], "digest": md, "size": len(body)}]
        top = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                          "manifests": entries}).encode()
        top_type = "application/vnd.oci.image.index.v1+json"
        if a.registry:
            sink.manifest(digest(img), img, "application/vnd.oci.image.manifest.v1+json")
            sink.manifest(md, body, f["manifest"])
        else:
            sink.blob(img)
            sink.blob(body)
    if a.registry:
        sink.manifest(a.tag, top, top_type)
    elif a.store:
        mdir = os.path.join(a.store, "manifests", a.store_registry, *a.name.split("/"))
        os.makedirs(mdir, exist_ok=True)
        with open(os.path.join(mdir, a.tag), "wb") as fh:
            fh.write(top)
    else:
        sink.blob(top)
        with open(os.path.join(a.layout, "oci-layout"), "w") as fh:
            fh.write('{"imageLayoutVersion":"1.0.0"}')
        index_path = os.path.join(a.layout, "index.json")
        index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}
        if os.path.exists(index_path):
            with open(index_path) as fh:
                index = json.load(fh)
        index["manifests"].append({"mediaType": top_type, "digest": digest(top), "size": len(top),
                                   "annotations": {"org.opencontainers.image.ref.name": a.tag}})
        with open(index_path, "w") as fh:
            json.dump(index, fh)
    print(digest(top))


if __name__ == "__main__":
    main()
