#!/usr/bin/python3
"""Offline checks of the Kubernetes manifests in deploy/k8s/ (and of deploy/Dockerfile).

No cluster is needed: the checks are static, and the daemons' command lines are tried on the
built binaries with --dry_run (which checks every flag, binds --listen and releases it, and
contacts nothing).

    /usr/bin/python3 deploy/k8s/manifests_test.py [--bin_dir=DIR] [--manifests=DIR]
        [--dockerfile=FILE] [--pod_ip=IP] [--rank=0]

--bin_dir (or the environment variable PS_BIN_DIR) holds the built binaries as Bazel lays them
out: DIR/server/coordinator/ps_coordinator, DIR/server/ps_server, DIR/worker/ps_worker, and, if
there, DIR/client/ps_ctl (validates the job file) and DIR/worker/tools/ps_datagen. `bazel-bin`
after a `bazel build`, or the runfiles root under `bazel test //deploy/k8s:manifests_test`.
Without it the checks that run binaries are skipped.

What is checked, for every YAML file under --manifests (default: this script's folder):
  - every document parses and has apiVersion, kind and metadata.name;
  - every kustomization.yaml lists files that exist, and every YAML file beside it is listed
    (as a resource or a patch); it names files in or below its folder only and no folder that
    holds it (kustomize refuses both); each kustomization is rendered (resources, then
    strategic-merge patches, `$patch: delete` removing an object) and the checks below run on
    what it renders; where kubectl is on PATH, `kubectl kustomize` must render each one too, to
    the same objects (the order of items in lists merged by key aside);
  - cross-references: Services select pods that carry their labels and target their ports,
    a StatefulSet's serviceName is a Service (headless when it has more than one replica),
    workload selectors match their pod templates, ConfigMaps (and their keys) and
    PersistentVolumeClaims named by volumes exist (a claim may come from another kustomization
    of the folder, applied first: it is then reported as external), volume mounts name volumes,
    probes name container ports, $(VAR) references name env entries, configMapKeyRef entries
    name keys that exist; containers of the image start its programs (exec probes too), other
    images (etcd) name a version;
  - the daemons' flags: the --listen port is a container port (and every container port is a
    --listen port), a worker listens on port 0 and takes its rank from its completion index,
    servers and workers advertise their pod IP, --coordinator names the coordinator's Service
    and a port of it that leads to the coordinator's --listen port, the coordinator's --job is a
    file of a mounted ConfigMap, and every flag is one the binary knows (--helpfull; exec
    probes' too);
  - the coordinator: one replica, or several only with --etcd; with --etcd: no --data_dir, the
    endpoints from one ConfigMap key (--etcd=$(VAR)), each a member of the etcd StatefulSet at
    its client port (or any HOST:PORT when the kustomization has no etcd), its pod IP
    advertised, a readiness probe `ps_ctl status --coordinator=localhost:<--listen port>` (only
    the leader passes it, so the Service routes to the leader) with a timeout above ps_ctl's, a
    liveness probe that does not run ps_ctl, a Service that publishes ready pods only, and a
    Deployment strategy that can replace them all (a rolling update waits for a standby to be
    ready, which never comes);
  - an etcd StatefulSet: an odd number >= 3 of members started in parallel, a headless
    serviceName publishing pods before they are ready, --name the pod's name, --initial-cluster
    naming exactly its pods <name>-0 ... <name>-(replicas-1) at <pod>.<service>:<peer port>,
    each pod advertising that peer URL and its client URL, --data-dir on a claim template;
  - the job file: cluster.num_servers = the servers' StatefulSet replicas, cluster.num_workers =
    the workers' Job completions = parallelism, the data paths lie on a volume the workers mount,
    the checkpoint_dir on one the coordinator and servers mount read-write, ps_datagen writes
    the job's data paths, and `ps_ctl validate` accepts it;
  - resources (requests and limits of cpu and memory), terminationGracePeriodSeconds, an Indexed
    Job's counts and backoffLimit, GPU limits as Kubernetes wants them (whole numbers, requests
    equal to limits);
  - each daemon's command line, built as the kubelet would (command + args, $(VAR) expanded from
    the container's env, with sample values for the downward API: status.podIP is --pod_ip, by
    default an address of this machine, since a worker binds its advertised address (Gloo
    listens there) and in the pod POD_IP is the pod's own; the completion index is --rank;
    resource fields come from the container's resources), with every mounted path mapped to a
    temporary folder (ConfigMaps written there), run with --dry_run;
  - where etcd is installed (Debian's etcd-server, as the tests' etcd clusters use): every flag
    of the etcd containers is one it knows, and the coordinators' command line and readiness
    probe on real processes: a one-member etcd on loopback, two coordinators with the
    container's flags (--listen, --advertise, --etcd, --job made local), the probe passing on
    exactly one and failing on the other as a standby, and, once the leader is SIGKILLed, passing
    on the other within the lease TTL + 8 s;
  - the Dockerfile: the programs the pods start are on its PATH, its bundle command packs them,
    and its user is the pods' runAsUser.

Prints one line per check (PASS, FAIL or SKIP, the file and object, what was checked), then
`N passed, M failed, K skipped`; exits 1 when a check failed, 2 on a usage error.
"""

import argparse
import copy
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

try:
    import yaml
except ImportError:
    sys.stderr.write(
        "manifests_test: Python's yaml module is missing: install Debian's python3-yaml "
        "and run this with /usr/bin/python3\n")
    sys.exit(2)

# The programs the pods may start: their paths under the bin dir (and in the bundle's bin/).
PROGRAMS = {
    "ps_coordinator": "server/coordinator/ps_coordinator",
    "ps_server": "server/ps_server",
    "ps_worker": "worker/ps_worker",
    "ps_ctl": "client/ps_ctl",
    "ps_datagen": "worker/tools/ps_datagen",
}
# The daemons: they take --listen/--advertise/--dry_run, and their binaries must be there.
DAEMONS = ("ps_coordinator", "ps_server", "ps_worker")
WORKLOAD_KINDS = ("StatefulSet", "Deployment", "Job", "DaemonSet", "ReplicaSet")
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
# Keys by which strategic-merge patches merge lists of objects; other lists are replaced.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "volumeClaimTemplates": "metadata.name",
}
DRY_RUN_TIMEOUT_S = 60


class Report:
    """Counts and prints the checks' outcomes."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    def check(self, ok, where, what, why=""):
        """A check that passes when `ok`; `why` says what is wrong otherwise."""
        if ok:
            self.passed += 1
            print(f"PASS  {where}: {what}")
        else:
            self.failed += 1
            print(f"FAIL  {where}: {what}" + (f": {why}" if why else ""))
        return ok

    def ok(self, where, what):
        return self.check(True, where, what)

    def fail(self, where, what, why=""):
        return self.check(False, where, what, why)

    def skip(self, where, what, why):
        self.skipped += 1
        print(f"SKIP  {where}: {what}: {why}")


class Doc:
    """One YAML document: the object, the file it came from, and whether it is a patch."""

    def __init__(self, path, index, obj):
        self.path = path
        self.index = index
        self.obj = obj

    @property
    def kind(self):
        return self.obj.get("kind", "?")

    @property
    def name(self):
        return (self.obj.get("metadata") or {}).get("name", "?")


class Rendered:
    """What one kustomization renders: its objects (patched) and where each came from."""

    def __init__(self, label, docs):
        self.label = label
        self.docs = docs

    def find(self, kind, name):
        for d in self.docs:
            if d.kind == kind and d.name == name:
                return d
        return None

    def of_kind(self, *kinds):
        return [d for d in self.docs if d.kind in kinds]


# ---------------------------------------------------------------------------------------------
# Helpers: quantities, $(VAR) expansion, strategic merge, job files.


_QUANTITY_SUFFIXES = {
    "": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}


def parse_quantity(value):
    """A Kubernetes quantity ("500m", "4Gi", 2) as a float; ValueError when malformed."""
    text = str(value).strip()
    m = re.fullmatch(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)", text)
    if not m or m.group(2) not in _QUANTITY_SUFFIXES:
        raise ValueError(f"not a quantity: {value!r}")
    return float(m.group(1)) * _QUANTITY_SUFFIXES[m.group(2)]


def expand(text, env):
    """Kubernetes' expansion of $(VAR) in command, args and env values: a defined VAR is
    replaced, an undefined reference is left as written, and $$ is a literal $."""
    out = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i):
            end = text.find(")", i)
            if end < 0:
                out.append(text[i:])
                break
            name = text[i + 2:end]
            out.append(env[name] if name in env else text[i:end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def references(text):
    """The names of the $(VAR) references in `text` ($$(VAR) is no reference)."""
    return re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", text)


def _merge_key_value(item, key):
    for part in key.split("."):
        if not isinstance(item, dict):
            return None
        item = item.get(part)
    return item


def strategic_merge(base, patch, field=""):
    """A strategic-merge patch as kustomize applies it, for what manifests use: maps merge,
    null deletes, lists of objects merge by their key (MERGE_KEYS), other lists are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = strategic_merge(out[k], v, k)
            else:
                out[k] = copy.deepcopy(v)
        return out
    key = MERGE_KEYS.get(field)
    if key and isinstance(base, list) and isinstance(patch, list):
        out = [copy.deepcopy(x) for x in base]
        for p in patch:
            pk = _merge_key_value(p, key)
            for i, b in enumerate(out):
                if pk is not None and _merge_key_value(b, key) == pk:
                    out[i] = strategic_merge(b, p, "")
                    break
            else:
                out.append(copy.deepcopy(p))
        return out
    return copy.deepcopy(patch)


def strip_pbtxt_comments(text):
    """Protobuf text without its # comments (outside strings)."""
    lines = []
    for line in text.splitlines():
        out, quote = [], None
        for ch in line:
            if quote:
                out.append(ch)
                if ch == quote:
                    quote = None
            elif ch in "\"'":
                quote = ch
                out.append(ch)
            elif ch == "#":
                break
            else:
                out.append(ch)
        lines.append("".join(out))
    return "\n".join(lines)


def pbtxt_scalar(text, field, default=None):
    """The value of the first `field: value` in protobuf text (strings unquoted), or default."""
    m = re.search(r"\b" + re.escape(field) + r"\s*:\s*(\"[^\"]*\"|'[^']*'|[^\s,;}\]]+)",
                  strip_pbtxt_comments(text))
    if not m:
        return default
    value = m.group(1)
    return value[1:-1] if value[0] in "\"'" else value


def pbtxt_strings(text, field):
    """Every string value of a (repeated) field: `f: "a"`, `f: ["a", "b"]`."""
    text = strip_pbtxt_comments(text)
    values = []
    for m in re.finditer(r"\b" + re.escape(field) + r"\s*:\s*(\[[^\]]*\]|\"[^\"]*\"|'[^']*')",
                         text):
        values += re.findall(r"\"([^\"]*)\"|'([^']*)'", m.group(1))
    return [a or b for a, b in values]


def under(path, directory):
    directory = directory.rstrip("/") or "/"
    return path == directory or path.startswith(directory + "/")


# ---------------------------------------------------------------------------------------------
# Loading and rendering.


def load_yaml_files(root, report, rel):
    """Every document of every YAML file under root, checked for apiVersion/kind/metadata.name.
    Returns {path: [Doc]}."""
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in sorted(filenames):
            if not f.endswith((".yaml", ".yml")):
                continue
            path = os.path.join(dirpath, f)
            try:
                with open(path) as fh:
                    objs = list(yaml.safe_load_all(fh))
            except (OSError, yaml.YAMLError) as e:
                report.fail(rel(path), "parses as YAML", str(e).replace("\n", " "))
                files[path] = []
                continue
            docs = []
            for i, obj in enumerate(objs):
                if obj is None:
                    continue
                where = f"{rel(path)} document {i + 1}"
                if not isinstance(obj, dict):
                    report.fail(where, "is a mapping", f"it is a {type(obj).__name__}")
                    continue
                meta = obj.get("metadata")
                missing = [k for k in ("apiVersion", "kind") if not obj.get(k)]
                if not isinstance(meta, dict) or not meta.get("name"):
                    missing.append("metadata.name")
                if report.check(not missing, f"{where} ({obj.get('kind', '?')})",
                                "has apiVersion, kind and metadata.name",
                                "missing " + ", ".join(missing)):
                    docs.append(Doc(path, i, obj))
            report.check(bool(docs), rel(path), f"holds {len(docs)} object(s)", "holds none")
            files[path] = docs
    return files


def render(kdir, files, report, rel, seen=()):
    """The objects kdir/kustomization.yaml renders: its resources (files, or folders with a
    kustomization of their own), then its patches. None when it cannot be rendered."""
    kpath = os.path.join(kdir, "kustomization.yaml")
    if kdir in seen:
        report.fail(rel(kpath), "has no cycle of resources", "it includes itself")
        return None
    kdocs = [d for d in files.get(kpath, []) if d.kind == "Kustomization"]
    if not kdocs:
        report.fail(rel(kpath), "is a Kustomization")
        return None
    k = kdocs[0].obj
    docs = []
    for res in k.get("resources") or []:
        path = os.path.normpath(os.path.join(kdir, res))
        if os.path.isdir(path):
            # kustomize refuses a base that holds a kustomization on the way to it.
            inside = [d for d in seen + (kdir,) if under(d, path)]
            if not report.check(not inside, rel(kpath),
                                f"resource {res} is not a folder that holds it (kustomize "
                                "refuses that: cycle detected)",
                                f"it holds {rel(inside[0]) if inside else ''}"):
                return None
            sub = render(path, files, report, rel, seen + (kdir,))
            if sub is None:
                return None
            docs += sub.docs
        elif path in files:
            # kustomize loads files in or below the kustomization's folder only.
            if not report.check(under(path, kdir), rel(kpath),
                                f"resource {res} lies in or below {rel(kdir)}"):
                return None
            docs += [copy.deepcopy(d) for d in files[path]]
        else:
            report.fail(rel(kpath), f"resource {res} exists")
            return None
    patches = []
    for p in list(k.get("patches") or []) + list(k.get("patchesStrategicMerge") or []):
        path = os.path.normpath(os.path.join(kdir, p["path"] if isinstance(p, dict) else p))
        if path not in files:
            report.fail(rel(kpath), f"patch {p} exists")
            return None
        if not report.check(under(path, kdir), rel(kpath), f"patch {p} lies in or below "
                            f"{rel(kdir)}"):
            return None
        patches += files[path]
    deleted = 0
    for p in patches:
        target = next((d for d in docs if d.kind == p.kind and d.name == p.name), None)
        if not report.check(target is not None, rel(p.path),
                            f"patch of {p.kind}/{p.name} has a target in {rel(kdir)}",
                            "no such object among the resources"):
            return None
        if p.obj.get("$patch") == "delete":
            # A strategic-merge patch that deletes the whole object.
            docs = [d for d in docs if d is not target]
            deleted += 1
            continue
        target.obj = strategic_merge(target.obj, p.obj)
    report.ok(rel(kpath), f"renders {len(docs)} objects ({len(patches) - deleted} patched, "
              f"{deleted} deleted)")
    return Rendered(rel(kdir), docs)


def check_kustomization_files(kdir, files, report, rel):
    """Every YAML file beside a kustomization.yaml is one of its resources or patches."""
    kpath = os.path.join(kdir, "kustomization.yaml")
    k = next((d.obj for d in files.get(kpath, []) if d.kind == "Kustomization"), {})
    listed = set()
    for r in k.get("resources") or []:
        listed.add(os.path.normpath(os.path.join(kdir, r)))
    for p in list(k.get("patches") or []) + list(k.get("patchesStrategicMerge") or []):
        listed.add(os.path.normpath(os.path.join(kdir, p["path"] if isinstance(p, dict) else p)))
    for path in sorted(files):
        if os.path.dirname(path) == kdir and path != kpath:
            report.check(path in listed, rel(path), f"is listed in {rel(kpath)}",
                         "a file no kustomization applies")


# ---------------------------------------------------------------------------------------------
# The checks of one rendered kustomization.


class Container:
    """A container of a workload, with its command line as the kubelet would build it."""

    def __init__(self, doc, pod, spec, opts, configmaps):
        self.doc = doc
        self.pod = pod
        self.spec = spec
        self.name = spec.get("name", "?")
        self.where = f"{doc.path_rel} {doc.kind}/{doc.name} container {self.name}"
        self.env, self.env_errors = self._env(opts, configmaps)
        raw = list(spec.get("command") or []) + list(spec.get("args") or [])
        self.raw_argv = [str(a) for a in raw]
        self.argv = [expand(a, self.env) for a in self.raw_argv]
        self.program = os.path.basename(self.argv[0]) if self.argv else ""
        self.image = str(spec.get("image", ""))
        self.flags = parse_flags(self.argv[1:])

    @property
    def ps_image(self):
        """Whether the container runs the project's image (ps, or REGISTRY/ps, any tag)."""
        return image_repository(self.image).rsplit("/", 1)[-1] == "ps"

    def _env(self, opts, configmaps):
        env, errors = {}, []
        for e in self.spec.get("env") or []:
            name = e.get("name")
            if "value" in e:
                env[name] = expand(str(e["value"]), env)
                continue
            src = e.get("valueFrom") or {}
            if "fieldRef" in src:
                path = src["fieldRef"].get("fieldPath", "")
                if path == "status.podIP":
                    env[name] = opts.pod_ip
                elif path == COMPLETION_INDEX:
                    env[name] = str(opts.rank)
                elif path == "metadata.name":
                    env[name] = f"{self.doc.name}-0"
                elif path == "metadata.namespace":
                    env[name] = "default"
                elif path in ("spec.nodeName", "spec.serviceAccountName"):
                    env[name] = "sample"
                elif path in ("status.hostIP", "status.podIPs"):
                    env[name] = "10.0.1.1"
                elif m := re.fullmatch(r"metadata\.labels\['([^']+)'\]", path):
                    env[name] = ((self.pod.get("metadata") or {}).get("labels") or {}).get(
                        m.group(1), "")
                else:
                    errors.append(f"env {name}: fieldRef {path} is not one this test knows")
            elif "resourceFieldRef" in src:
                ref = src["resourceFieldRef"]
                kind, _, res = ref.get("resource", "").partition(".")
                owner = ref.get("containerName", self.spec.get("name"))
                target = next((c for c in self.pod.get("containers", [])
                               if c.get("name") == owner), None)
                if target is None:
                    errors.append(f"env {name}: resourceFieldRef names no container {owner}")
                    continue
                value = ((target.get("resources") or {}).get(kind) or {}).get(res)
                if value is None:
                    errors.append(f"env {name}: {ref.get('resource')} is not set, so the pod "
                                  "would get the node's capacity")
                    continue
                divisor = parse_quantity(ref.get("divisor", "1"))
                env[name] = str(math.ceil(parse_quantity(value) / divisor))
            elif "configMapKeyRef" in src:
                ref = src["configMapKeyRef"]
                data = configmaps.get(ref.get("name"), {})
                env[name] = str(data.get(ref.get("key"), ""))
            elif "secretKeyRef" in src:
                env[name] = "sample-secret"
            else:
                errors.append(f"env {name}: no value and no valueFrom this test knows")
        return env, errors

    def mounts(self):
        """[(mountPath, volume, readOnly)] with the pod's volume (or claim template) objects."""
        volumes = {v.get("name"): v for v in self.pod.get("volumes") or []}
        for t in (self.doc.obj.get("spec") or {}).get("volumeClaimTemplates") or []:
            volumes[(t.get("metadata") or {}).get("name")] = {
                "name": t["metadata"]["name"], "persistentVolumeClaim": {"template": True}}
        out = []
        for m in self.spec.get("volumeMounts") or []:
            out.append((m.get("mountPath", ""), volumes.get(m.get("name")),
                        bool(m.get("readOnly"))))
        return out

    def mount_of(self, path):
        """The (mountPath, volume, readOnly) that holds `path`, the deepest one, or None."""
        best = None
        for mount in self.mounts():
            if mount[1] is not None and under(path, mount[0]):
                if best is None or len(mount[0]) > len(best[0]):
                    best = mount
        return best

    def port_numbers(self):
        """{containerPort: name} of TCP ports."""
        return {p.get("containerPort"): p.get("name") for p in self.spec.get("ports") or []
                if p.get("protocol", "TCP") == "TCP"}

    def resolve_port(self, port):
        """A port given by number or by name, as a number of this container, or None."""
        for number, name in self.port_numbers().items():
            if port == number or (name is not None and port == name):
                return number
        return None


def parse_flags(args):
    """{name: value} of --name=value and --name (value "") arguments (names with - or _)."""
    flags = {}
    for a in args:
        m = re.fullmatch(r"--?([A-Za-z0-9_-]+)(?:=(.*))?", a, re.S)
        if m:
            flags[m.group(1)] = m.group(2) if m.group(2) is not None else ""
    return flags


def image_repository(image):
    """An image reference without its tag or digest: quay.io/coreos/etcd:v3.4.23 ->
    quay.io/coreos/etcd (a registry's :port is kept)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[:len(name) - len(last[-1])] + last[-1].split(":", 1)[0]
    return name


def image_tag(image):
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[1] if ":" in name else None


def probe_exec(spec, probe_name):
    """The command of an exec probe of the container spec, or None."""
    return [str(a) for a in ((spec.get(probe_name) or {}).get("exec") or {}).get("command") or []
            ] or None


def pod_template(doc):
    spec = doc.obj.get("spec") or {}
    return (spec.get("template") or {}).get("spec"), ((spec.get("template") or {}).get(
        "metadata") or {}).get("labels") or {}


def host_port(text):
    m = re.fullmatch(r"\[?([^\]]*?)\]?:(\d+)", text or "")
    return (m.group(1), int(m.group(2))) if m else (None, None)


def check_rendered(r, files, opts, report, rel, tmp_root, jobs_seen):
    label = f"[{r.label}]"
    for d in r.docs:
        d.path_rel = f"{label} {rel(d.path)}"

    # Unique objects.
    seen = {}
    for d in r.docs:
        key = (d.kind, d.name)
        report.check(key not in seen, f"{d.path_rel} {d.kind}/{d.name}", "is the only one so named",
                     f"also in {rel(seen[key].path) if key in seen else ''}")
        seen.setdefault(key, d)

    configmaps = {d.name: d.obj.get("data") or {} for d in r.of_kind("ConfigMap")}
    claims = {d.name for d in r.of_kind("PersistentVolumeClaim")}
    all_claims = {d.name: rel(d.path) for docs in files.values() for d in docs
                  if d.kind == "PersistentVolumeClaim"}
    services = {d.name: d for d in r.of_kind("Service")}

    # Workloads and their containers.
    workloads = r.of_kind(*WORKLOAD_KINDS)
    containers = []
    for d in workloads:
        where = f"{d.path_rel} {d.kind}/{d.name}"
        spec = d.obj.get("spec") or {}
        pod, labels = pod_template(d)
        if not report.check(isinstance(pod, dict) and pod.get("containers"), where,
                            "has a pod template with containers"):
            continue
        selector = (spec.get("selector") or {}).get("matchLabels")
        if d.kind != "Job" or selector:
            report.check(bool(selector) and all(labels.get(k) == v for k, v in selector.items()),
                         where, f"selector {selector} matches the pod labels {labels}")
        if d.kind == "StatefulSet":
            svc = services.get(spec.get("serviceName"))
            if report.check(svc is not None, where,
                            f"serviceName {spec.get('serviceName')!r} is a Service"):
                replicas = spec.get("replicas", 1)
                headless = (svc.obj.get("spec") or {}).get("clusterIP") == "None"
                report.check(replicas <= 1 or headless, where,
                             f"its Service {svc.name} is headless (stable pod DNS names for "
                             f"{replicas} replicas)", "clusterIP is not None")
        if d.kind == "Job":
            report.check(pod.get("restartPolicy") in ("Never", "OnFailure"), where,
                         f"restartPolicy {pod.get('restartPolicy')} is Never or OnFailure")
            report.check(spec.get("backoffLimit") is not None and spec["backoffLimit"] <= 3,
                         where, f"backoffLimit {spec.get('backoffLimit')} is set and small (<= 3)")
        report.check(pod.get("terminationGracePeriodSeconds") is not None, where,
                     f"terminationGracePeriodSeconds is set "
                     f"({pod.get('terminationGracePeriodSeconds')})")

        volume_names = {v.get("name") for v in pod.get("volumes") or []}
        volume_names |= {(t.get("metadata") or {}).get("name")
                         for t in spec.get("volumeClaimTemplates") or []}
        for v in pod.get("volumes") or []:
            if "configMap" in v:
                name = v["configMap"].get("name")
                if report.check(name in configmaps, where,
                                f"volume {v.get('name')}: ConfigMap {name} exists"):
                    for item in v["configMap"].get("items") or []:
                        report.check(item.get("key") in configmaps[name], where,
                                     f"volume {v.get('name')}: key {item.get('key')} is in "
                                     f"ConfigMap {name}")
            if "persistentVolumeClaim" in v:
                name = v["persistentVolumeClaim"].get("claimName")
                if name in claims:
                    report.ok(where, f"volume {v.get('name')}: PersistentVolumeClaim {name} exists")
                else:
                    report.check(name in all_claims, where,
                                 f"volume {v.get('name')}: PersistentVolumeClaim {name} is "
                                 f"external, made by {all_claims.get(name)} (applied first)",
                                 "no manifest under the folder makes it")

        for c in pod.get("containers") or []:
            ct = Container(d, pod, c, opts, configmaps)
            containers.append(ct)
            for m in c.get("volumeMounts") or []:
                report.check(m.get("name") in volume_names, ct.where,
                             f"mount {m.get('mountPath')} names a volume ({m.get('name')})")
            report.check(not ct.env_errors, ct.where, "every env entry has a value",
                         "; ".join(ct.env_errors))
            for e in c.get("env") or []:
                ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
                if ref is not None and not ref.get("optional"):
                    report.check(ref.get("key") in configmaps.get(ref.get("name"), {}), ct.where,
                                 f"env {e.get('name')}: key {ref.get('key')} of ConfigMap "
                                 f"{ref.get('name')} exists")
            undefined = sorted({v for a in ct.raw_argv for v in references(a)} - set(ct.env))
            report.check(not undefined, ct.where,
                         "every $(VAR) of command and args is an env entry",
                         "undefined: " + ", ".join(undefined))
            res = c.get("resources") or {}
            missing = [f"{k}.{r_}" for k in ("requests", "limits") for r_ in ("cpu", "memory")
                       if (res.get(k) or {}).get(r_) is None]
            report.check(not missing, ct.where, "has cpu and memory requests and limits",
                         "missing " + ", ".join(missing))
            for k in ("requests", "limits"):
                for r_, v in (res.get(k) or {}).items():
                    try:
                        parse_quantity(v)
                    except ValueError as e:
                        report.fail(ct.where, f"{k}.{r_} is a quantity", str(e))
            gpus = (res.get("limits") or {}).get("nvidia.com/gpu")
            if gpus is not None:
                req = (res.get("requests") or {}).get("nvidia.com/gpu", gpus)
                report.check(isinstance(gpus, int) and gpus >= 1 and req == gpus, ct.where,
                             f"nvidia.com/gpu limit {gpus} is a whole number, requests equal")
            for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
                probe = c.get(probe_name)
                if probe is None:
                    continue
                port = (probe.get("tcpSocket") or probe.get("httpGet") or probe.get("grpc")
                        or {}).get("port")
                if port is not None:
                    report.check(ct.resolve_port(port) is not None, ct.where,
                                 f"{probe_name} port {port} is a container port")
            if ct.ps_image:
                report.check(ct.program in PROGRAMS, ct.where,
                             f"starts a program of the image ({ct.program or 'none'})",
                             "not one of " + ", ".join(PROGRAMS))
                exec_cmd = probe_exec(c, "readinessProbe") or probe_exec(c, "livenessProbe")
                if exec_cmd:
                    report.check(os.path.basename(exec_cmd[0]) in PROGRAMS, ct.where,
                                 f"its exec probe runs a program of the image ({exec_cmd[0]})")
            else:
                # Another image (etcd): pinned to a version, so that a restart gets the same.
                tag = image_tag(ct.image)
                report.check(tag not in (None, "latest") or "@" in ct.image, ct.where,
                             f"image {ct.image} names a version", "no tag, or :latest")

    # Services: their selectors and target ports.
    for name, svc in services.items():
        where = f"{svc.path_rel} Service/{name}"
        spec = svc.obj.get("spec") or {}
        selector = spec.get("selector") or {}
        selected = [ct for ct in containers
                    if selector and all(pod_template(ct.doc)[1].get(k) == v
                                        for k, v in selector.items())]
        if not report.check(bool(selected), where,
                            f"selector {selector} matches the labels of pods",
                            "no workload's pod template carries them"):
            continue
        for p in spec.get("ports") or []:
            target = p.get("targetPort", p.get("port"))
            ok = any(ct.resolve_port(target) is not None for ct in selected)
            report.check(ok, where, f"port {p.get('port')} targets a container port ({target}) "
                         f"of {sorted({ct.doc.name for ct in selected})}")

    # The daemons' flags.
    by_program = {}
    for ct in containers:
        by_program.setdefault(ct.program, []).append(ct)
    for ct in containers:
        if ct.program not in DAEMONS:
            continue
        listen = ct.flags.get("listen")
        host, port = host_port(listen)
        if not report.check(port is not None, ct.where, f"--listen={listen} is HOST:PORT"):
            continue
        if ct.program == "ps_worker":
            report.check(port == 0, ct.where, "--listen port is 0 (Gloo picks its own ports)")
        else:
            report.check(port != 0, ct.where, f"--listen port {port} is fixed",
                         "Services and probes need a fixed port")
        if port:
            report.check(port in ct.port_numbers(), ct.where,
                         f"--listen port {port} is a container port")
        for number in ct.port_numbers():
            report.check(number == port, ct.where,
                         f"container port {number} is the --listen port")
        adv = ct.flags.get("advertise")
        raw_adv = next((a for a in ct.raw_argv if a.startswith("--advertise=")), "")
        if ct.program in ("ps_server", "ps_worker") or "etcd" in ct.flags:
            # With --etcd each coordinator names itself in the election: its own address.
            var = references(raw_adv)
            ok = raw_adv != "" and len(var) == 1 and any(
                e.get("name") == var[0] and ((e.get("valueFrom") or {}).get("fieldRef") or {}).get(
                    "fieldPath") == "status.podIP" for e in ct.spec.get("env") or [])
            report.check(ok, ct.where, f"advertises its pod IP ({raw_adv or 'no --advertise'})",
                         "want --advertise=$(VAR), VAR from fieldRef status.podIP")
        else:
            svc = services.get((adv or "").split(".")[0])
            ok = svc is not None and ct in [
                c for c in containers if all(pod_template(c.doc)[1].get(k) == v for k, v in (
                    (svc.obj.get("spec") or {}).get("selector") or {}).items())]
            report.check(ok, ct.where, f"advertises a Service that selects it ({adv})")
        if ct.program == "ps_worker":
            raw_rank = next((a for a in ct.raw_argv if a.startswith("--rank=")), "")
            var = references(raw_rank)
            ok = len(var) == 1 and any(
                e.get("name") == var[0] and ((e.get("valueFrom") or {}).get("fieldRef") or {}).get(
                    "fieldPath") == COMPLETION_INDEX for e in ct.spec.get("env") or [])
            report.check(ok and ct.doc.kind == "Job" and (ct.doc.obj.get("spec") or {}).get(
                "completionMode") == "Indexed", ct.where,
                f"takes its rank from the Indexed Job's completion index ({raw_rank})")
        if ct.program in ("ps_server", "ps_worker"):
            check_coordinator_address(ct, services, containers, report)

    # The job file, from the ConfigMap the coordinator mounts.
    coordinators = by_program.get("ps_coordinator", [])
    if any(ct.program in DAEMONS for ct in containers):
        report.check(len(coordinators) == 1, label, "one coordinator container",
                     f"found {len(coordinators)}")
    etcd = check_etcd(by_program.get("etcd", []), services, report)
    for ct in coordinators:
        replicas = (ct.doc.obj.get("spec") or {}).get("replicas", 1)
        if "etcd" in ct.flags:
            report.check(ct.doc.kind in ("StatefulSet", "Deployment") and replicas >= 1,
                         ct.where, f"the coordinators are a StatefulSet or Deployment of "
                         f"{replicas} replicas, failing over through etcd (--etcd)")
            check_coordinators_with_etcd(ct, replicas, services, containers, etcd, report)
        else:
            report.check(ct.doc.kind in ("StatefulSet", "Deployment") and replicas == 1,
                         ct.where, f"the coordinator is a StatefulSet or Deployment of 1 replica "
                         f"({replicas}): several only with --etcd")
        job_path = ct.flags.get("job", "")
        mount = ct.mount_of(job_path)
        text = None
        if mount and "configMap" in (mount[1] or {}):
            cm = mount[1]["configMap"]
            key = os.path.relpath(job_path, mount[0])
            for item in cm.get("items") or []:
                if item.get("path") == key:
                    key = item.get("key")
            text = configmaps.get(cm.get("name"), {}).get(key)
        if not report.check(text is not None, ct.where,
                            f"--job={job_path} is a file of a mounted ConfigMap"):
            continue
        jobs_seen.append(text)
        ct.job_text = text
        check_job(text, ct, by_program, report, opts, tmp_root)

    # ps_datagen writes where the job reads.
    for ct in by_program.get("ps_datagen", []):
        train = {p for t in jobs_seen for p in pbtxt_strings(t, "train_paths")}
        heldout = {p for t in jobs_seen for p in pbtxt_strings(t, "eval_paths")}
        report.check(ct.flags.get("out") in train, ct.where,
                     f"--out={ct.flags.get('out')} is a train_paths of the job", f"{sorted(train)}")
        if "heldout_out" in ct.flags:
            report.check(ct.flags["heldout_out"] in heldout, ct.where,
                         f"--heldout_out={ct.flags['heldout_out']} is an eval_paths of the job",
                         f"{sorted(heldout)}")
        for flag in ("out", "heldout_out"):
            if flag in ct.flags:
                m = ct.mount_of(ct.flags[flag])
                report.check(m is not None and not m[2], ct.where,
                             f"--{flag} lies on a read-write mounted volume")

    return containers


def check_coordinator_address(ct, services, containers, report):
    """--coordinator=HOST:PORT: HOST is the coordinator's Service, PORT one of its ports, which
    leads to the coordinator's --listen port."""
    addr = ct.flags.get("coordinator")
    host, port = host_port(addr)
    svc = services.get((host or "").split(".")[0])
    what = f"--coordinator={addr} is the coordinator's Service and port"
    if svc is None:
        report.fail(ct.where, what, f"no Service named {(host or '').split('.')[0]!r}")
        return
    spec = svc.obj.get("spec") or {}
    sport = next((p for p in spec.get("ports") or [] if p.get("port") == port), None)
    if sport is None:
        report.fail(ct.where, what, f"Service {svc.name} has no port {port}")
        return
    target = sport.get("targetPort", port)
    selector = spec.get("selector") or {}
    for c in containers:
        if c.program != "ps_coordinator" or not selector or not all(
                pod_template(c.doc)[1].get(k) == v for k, v in selector.items()):
            continue
        number = c.resolve_port(target)
        listen_port = host_port(c.flags.get("listen"))[1]
        report.check(number is not None and number == listen_port, ct.where, what,
                     f"Service {svc.name} port {port} targets {target}, the coordinator "
                     f"listens on {listen_port}")
        return
    report.fail(ct.where, what, f"Service {svc.name} selects no ps_coordinator pod")


def url_host_port(url):
    """(host, port) of http://HOST:PORT[/...], or (None, None)."""
    m = re.fullmatch(r"https?://\[?([^\]/]*?)\]?:(\d+)/?", url or "")
    return (m.group(1), int(m.group(2))) if m else (None, None)


def check_etcd(members, services, report):
    """The etcd StatefulSet: its --initial-cluster names its own pods (<name>-0 ... <name>-(N-1))
    at their stable DNS names under its headless Service and its peer port, as each member
    advertises itself; its data on a claim. Returns {"sts", "service", "replicas",
    "client_port", "labels"} of the (first) one, or None when the kustomization has none."""
    info = None
    for ct in members:
        doc = ct.doc
        spec = doc.obj.get("spec") or {}
        replicas = spec.get("replicas", 1)
        svc_name = spec.get("serviceName")
        svc = services.get(svc_name)
        report.check(doc.kind == "StatefulSet", ct.where, "etcd runs as a StatefulSet (stable "
                     "member names and a claim each)", f"it is a {doc.kind}")
        report.check(replicas >= 3 and replicas % 2 == 1, ct.where,
                     f"{replicas} members: odd, and at least 3 (one may be lost)")
        svc_spec = (svc.obj.get("spec") or {}) if svc else {}
        report.check(svc is not None and svc_spec.get("clusterIP") == "None" and
                     svc_spec.get("publishNotReadyAddresses") is True, ct.where,
                     f"serviceName {svc_name} is headless and publishes members before they "
                     "are ready (they must find each other to become ready)")
        report.check(spec.get("podManagementPolicy") == "Parallel", ct.where,
                     "podManagementPolicy Parallel (no member is ready before a quorum is up)")
        name_var = references(next((a for a in ct.raw_argv if a.startswith("--name=")), ""))
        ok = len(name_var) == 1 and any(
            e.get("name") == name_var[0] and ((e.get("valueFrom") or {}).get("fieldRef") or {}).get(
                "fieldPath") == "metadata.name" for e in ct.spec.get("env") or [])
        report.check(ok, ct.where, "--name is the pod's name (fieldRef metadata.name)")
        _, peer_port = url_host_port(ct.flags.get("listen-peer-urls"))
        _, client_port = url_host_port(ct.flags.get("listen-client-urls"))
        for flag, port in (("listen-peer-urls", peer_port), ("listen-client-urls", client_port)):
            report.check(port is not None and port in ct.port_numbers(), ct.where,
                         f"--{flag} port {port} is a container port")
        cluster = {}
        for entry in (ct.flags.get("initial-cluster") or "").split(","):
            name, _, url = entry.partition("=")
            cluster[name] = url
        want = [f"{doc.name}-{i}" for i in range(replicas)]
        report.check(sorted(cluster) == sorted(want), ct.where,
                     f"--initial-cluster names the {replicas} pods {', '.join(want)}",
                     f"it names {', '.join(sorted(cluster))}")
        raw_adv = next((a for a in ct.raw_argv if a.startswith("--initial-advertise-peer-urls=")),
                       "")
        for name in want:
            host, port = url_host_port(cluster.get(name))
            labels = (host or "").split(".")
            report.check(labels[:2] == [name, svc_name] and port == peer_port, ct.where,
                         f"--initial-cluster: {name} at {cluster.get(name)}, its DNS name under "
                         f"{svc_name} and the peer port {peer_port}")
            env = dict(ct.env)
            if name_var:
                env[name_var[0]] = name
            adv = expand(raw_adv.partition("=")[2], env)
            report.check(adv == cluster.get(name), ct.where,
                         f"{name} advertises the peer URL --initial-cluster gives it ({adv})")
            adv_client = expand(next((a for a in ct.raw_argv
                                      if a.startswith("--advertise-client-urls=")), "=").partition(
                                          "=")[2], env)
            report.check(url_host_port(adv_client) == (f"{name}.{svc_name}", client_port),
                         ct.where, f"{name} advertises its client URL {adv_client}")
        m = ct.mount_of(ct.flags.get("data-dir", ""))
        report.check(m is not None and (m[1] or {}).get("persistentVolumeClaim", {}).get(
            "template") and not m[2], ct.where,
            f"--data-dir={ct.flags.get('data-dir')} lies on a claim of the member's own "
            "(volumeClaimTemplates)")
        if info is None:
            info = {"sts": doc.name, "service": svc_name, "replicas": replicas,
                    "client_port": client_port, "labels": pod_template(doc)[1], "ct": ct}
    report.check(len(members) <= 1, "etcd", "one etcd StatefulSet", f"found {len(members)}")
    return info


def check_coordinators_with_etcd(ct, replicas, services, containers, etcd, report):
    """Coordinators that fail over through etcd: no --data_dir, --etcd from one ConfigMap key,
    naming the members of the etcd in the kustomization (when there is one), a readiness probe
    that only the leader passes (so that the coordinator's Service routes to it alone), a
    liveness probe that standbys pass, and an update strategy that can replace them."""
    report.check("data_dir" not in ct.flags, ct.where,
                 "no --data_dir with --etcd (the state lives in etcd)")
    raw = next((a for a in ct.raw_argv if a.startswith("--etcd=")), "")
    var = references(raw)
    ok = raw == f"--etcd=$({var[0]})" if len(var) == 1 else False
    ok = ok and any(e.get("name") == var[0] and "configMapKeyRef" in (e.get("valueFrom") or {})
                    for e in ct.spec.get("env") or [])
    report.check(ok, ct.where, f"--etcd comes from one ConfigMap key ({raw})",
                 "want --etcd=$(VAR), VAR from a configMapKeyRef: the one place naming etcd")
    endpoints = [e for e in (ct.flags.get("etcd") or "").split(",")]
    for e in endpoints:
        host, port = host_port(e)
        if not report.check(host and port, ct.where, f"etcd endpoint {e!r} is HOST:PORT"):
            continue
        if etcd is None:
            report.ok(ct.where, f"etcd endpoint {e} is an etcd of the operator's own (no etcd "
                      "StatefulSet here)")
            continue
        labels = host.split(".")
        member = re.fullmatch(re.escape(etcd["sts"]) + r"-(\d+)", labels[0])
        if member and len(labels) > 1 and labels[1] == etcd["service"]:
            ok = int(member.group(1)) < etcd["replicas"] and port == etcd["client_port"]
        else:
            svc = services.get(labels[0])
            sel = ((svc.obj.get("spec") or {}).get("selector") or {}) if svc else {}
            sport = next((p for p in ((svc.obj.get("spec") or {}).get("ports") or [])
                          if p.get("port") == port), None) if svc else None
            ok = (bool(sel) and all(etcd["labels"].get(k) == v for k, v in sel.items()) and
                  sport is not None and etcd["ct"].resolve_port(
                      sport.get("targetPort", port)) == etcd["client_port"])
        report.check(ok, ct.where, f"etcd endpoint {e} is a member of StatefulSet "
                     f"{etcd['sts']} (or a Service of them) at its client port "
                     f"{etcd['client_port']}")
    if etcd is not None:
        report.check(len(set(endpoints)) >= min(2, etcd["replicas"]), ct.where,
                     f"--etcd names several members ({len(set(endpoints))}), so that one lost "
                     "is no matter")

    # Readiness: ps_ctl status against its own --listen port, which a standby fails.
    listen_port = host_port(ct.flags.get("listen"))[1]
    probe = ct.spec.get("readinessProbe") or {}
    cmd = probe_exec(ct.spec, "readinessProbe") or []
    flags = parse_flags(cmd[2:])
    host, port = host_port(flags.get("coordinator"))
    ok = (len(cmd) >= 2 and os.path.basename(cmd[0]) == "ps_ctl" and cmd[1] == "status" and
          host in ("localhost", "127.0.0.1", "[::1]", "::1") and port == listen_port)
    report.check(ok, ct.where, f"readinessProbe runs ps_ctl status against its own --listen port "
                 f"{listen_port} ({' '.join(cmd) or 'no exec probe'}): only the leader is ready")
    timeout_ms = int(flags.get("timeout_ms", 3000))
    report.check(probe.get("timeoutSeconds", 1) * 1000 > timeout_ms, ct.where,
                 f"readinessProbe timeoutSeconds {probe.get('timeoutSeconds', 1)} exceeds "
                 f"ps_ctl's --timeout_ms {timeout_ms}")
    live = ct.spec.get("livenessProbe")
    live_cmd = probe_exec(ct.spec, "livenessProbe") or []
    report.check(live is not None and not any("ps_ctl" in a for a in live_cmd), ct.where,
                 "livenessProbe does not depend on leadership (standbys are not restarted)",
                 "none" if live is None else "it runs ps_ctl")

    # The Service the members dial routes to ready pods only: the leader.
    for svc in services.values():
        spec = svc.obj.get("spec") or {}
        sel = spec.get("selector") or {}
        if sel and all(pod_template(ct.doc)[1].get(k) == v for k, v in sel.items()):
            report.check(not spec.get("publishNotReadyAddresses") and
                         spec.get("clusterIP") != "None", ct.where,
                         f"Service {svc.name} routes to the ready coordinator alone (ClusterIP, "
                         "not publishing pods that are not ready)")

    # A Deployment's rolling update waits for new pods to be ready; a new coordinator stands by.
    if ct.doc.kind == "Deployment" and replicas > 1:
        strategy = (ct.doc.obj.get("spec") or {}).get("strategy") or {}
        unavailable = str((strategy.get("rollingUpdate") or {}).get("maxUnavailable", "25%"))
        ok = strategy.get("type") == "Recreate" or (
            strategy.get("type", "RollingUpdate") == "RollingUpdate" and (
                unavailable == "100%" or (unavailable.isdigit() and int(unavailable) >= replicas)))
        report.check(ok, ct.where, "its update strategy can replace every coordinator "
                     "(Recreate, or maxUnavailable 100%): one ready pod at a time never comes",
                     f"strategy {strategy or 'default (maxUnavailable 25%)'}")


def check_job(text, coordinator, by_program, report, opts, tmp_root):
    where = f"{coordinator.where} --job"
    servers = [ct for ct in by_program.get("ps_server", [])]
    workers = [ct for ct in by_program.get("ps_worker", [])]
    num_servers = int(pbtxt_scalar(text, "num_servers", 1))
    num_workers = int(pbtxt_scalar(text, "num_workers", 1))
    replicas = sum((ct.doc.obj.get("spec") or {}).get("replicas", 1) for ct in servers)
    report.check(num_servers == replicas, where,
                 f"cluster.num_servers {num_servers} = replicas of the servers' StatefulSet "
                 f"{replicas}")
    for ct in workers:
        spec = ct.doc.obj.get("spec") or {}
        report.check(ct.doc.kind == "Job" and spec.get("completionMode") == "Indexed", ct.where,
                     "the workers are an Indexed Job")
        report.check(spec.get("completions") == num_workers == spec.get("parallelism"), ct.where,
                     f"completions {spec.get('completions')} = parallelism "
                     f"{spec.get('parallelism')} = cluster.num_workers {num_workers}")
    report.check(len(workers) == 1, where, "one Job runs the workers", f"found {len(workers)}")
    report.check(bool(servers), where, "a StatefulSet runs the servers")

    paths = pbtxt_strings(text, "train_paths") + pbtxt_strings(text, "eval_paths")
    report.check(bool(pbtxt_strings(text, "train_paths")), where, "the job has train_paths")
    for ct in workers:
        for p in paths:
            m = ct.mount_of(p)
            report.check(m is not None and "persistentVolumeClaim" in (m[1] or {}), ct.where,
                         f"data path {p} lies on a mounted PersistentVolumeClaim",
                         "no volume mounted there")
    ckpt = pbtxt_scalar(text, "checkpoint_dir")
    if ckpt:
        for ct in [coordinator] + servers:
            m = ct.mount_of(ckpt)
            report.check(m is not None and not m[2] and "persistentVolumeClaim" in (m[1] or {}),
                         ct.where, f"checkpoint_dir {ckpt} lies on a read-write mounted "
                         "PersistentVolumeClaim")
    ps_ctl = opts.binary("ps_ctl")
    if ps_ctl is None:
        report.skip(where, "ps_ctl validate", "no client/ps_ctl in the bin dir")
        return
    path = os.path.join(tempfile.mkdtemp(dir=tmp_root), "job.pbtxt")
    with open(path, "w") as f:
        f.write(text)
    # The data lies on the volume, not here: the job file alone.
    out = subprocess.run([ps_ctl, "validate", "--check_data=false", path], capture_output=True,
                         text=True, timeout=DRY_RUN_TIMEOUT_S)
    report.check(out.returncode == 0, where, "ps_ctl validate accepts the job",
                 (out.stdout + out.stderr).strip().replace("\n", " | "))


# ---------------------------------------------------------------------------------------------
# Running the binaries.


_help_cache = {}


def known_flags(binary):
    """The flags a binary defines, from its --helpfull; None when it cannot tell."""
    if binary not in _help_cache:
        try:
            out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True,
                                 timeout=DRY_RUN_TIMEOUT_S)
            names = set(re.findall(r"^    --([A-Za-z0-9_]+) \(", out.stdout + out.stderr, re.M))
        except (OSError, subprocess.TimeoutExpired):
            names = set()
        _help_cache[binary] = names or None
    return _help_cache[binary]


def run_binaries(containers, opts, report, tmp_root):
    check_etcd_flags([ct for ct in containers if ct.program == "etcd"], report)
    for ct in containers:
        for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
            cmd = probe_exec(ct.spec, probe_name)
            program = os.path.basename(cmd[0]) if cmd else ""
            if program not in PROGRAMS:
                continue
            binary = opts.binary(program)
            flags = known_flags(binary) if binary else None
            if flags is None:
                report.skip(ct.where, f"{probe_name}: {program} knows every flag given",
                            f"no {PROGRAMS[program]} in the bin dir")
                continue
            unknown = sorted(f for f in parse_flags(cmd[1:]) if f not in flags)
            report.check(not unknown, ct.where, f"{probe_name}: {program} knows every flag given "
                         f"({' '.join(cmd[1:])})",
                         "unknown: " + ", ".join("--" + f for f in unknown))
        if ct.program not in PROGRAMS:
            continue
        binary = opts.binary(ct.program)
        if binary is None:
            why = ("no bin dir (--bin_dir or PS_BIN_DIR)" if not opts.bin_dir else
                   f"{PROGRAMS[ct.program]} is not in {opts.bin_dir}")
            if opts.bin_dir and ct.program in DAEMONS:
                report.fail(ct.where, "the binary is there to try", why)
            else:
                report.skip(ct.where, f"{ct.program} runs with these flags", why)
            continue
        flags = known_flags(binary)
        if flags is None:
            report.fail(ct.where, f"{ct.program} --helpfull lists its flags")
        else:
            unknown = sorted(f for f in ct.flags
                             if f not in flags and not (f.startswith("no") and f[2:] in flags))
            report.check(not unknown, ct.where, f"{ct.program} knows every flag given",
                         "unknown: " + ", ".join("--" + f for f in unknown))
        if ct.program in DAEMONS:
            dry_run(ct, binary, report, tmp_root)
        if ct.program == "ps_coordinator" and "etcd" in ct.flags and getattr(ct, "job_text", None):
            check_failover_live(ct, ct.job_text, opts, report, tmp_root)


def dry_run(ct, binary, report, tmp_root):
    """Runs the container's command line with --dry_run, every mount mapped to a temporary
    folder (ConfigMaps written into it)."""
    root = tempfile.mkdtemp(dir=tmp_root, prefix=f"{ct.doc.name}-")
    mapping = []
    configmaps = {d.name: d.obj.get("data") or {} for d in ct.doc_rendered.of_kind("ConfigMap")}
    for i, (path, volume, _) in enumerate(ct.mounts()):
        local = os.path.join(root, f"mount{i}")
        os.makedirs(local)
        if volume and "configMap" in volume:
            data = configmaps.get(volume["configMap"].get("name"), {})
            items = volume["configMap"].get("items")
            pairs = [(it["key"], it.get("path", it["key"])) for it in items] if items else [
                (k, k) for k in data]
            for key, name in pairs:
                os.makedirs(os.path.dirname(os.path.join(local, name)), exist_ok=True)
                with open(os.path.join(local, name), "w") as f:
                    f.write(str(data.get(key, "")))
        mapping.append((path.rstrip("/"), local))
    mapping.sort(key=lambda m: -len(m[0]))

    def localize(arg):
        m = re.fullmatch(r"(--?[A-Za-z0-9_]+=)(/.*)", arg, re.S)
        prefix, value = (m.group(1), m.group(2)) if m else ("", arg)
        for path, local in mapping:
            if under(value, path):
                return prefix + local + value[len(path):]
        return arg

    args = [localize(a) for a in ct.argv[1:]]
    for attempt in range(2):
        cmd = [binary] + args + ["--dry_run"]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=DRY_RUN_TIMEOUT_S)
            rc, text = out.returncode, (out.stdout + out.stderr).strip()
        except subprocess.TimeoutExpired:
            rc, text = None, f"did not exit within {DRY_RUN_TIMEOUT_S} s"
        fixed_port = any(re.fullmatch(r"--listen=.*:[1-9][0-9]*", a) for a in args)
        busy = rc not in (0, None) and fixed_port and re.search(r"in use", text, re.I)
        if attempt == 0 and busy:
            # The fixed port is taken on this machine (not in the pod): try the rest on port 0.
            args = [re.sub(r"^(--listen=.*:)\d+$", r"\g<1>0", a) for a in args]
            continue
        shown = " ".join(ct.argv[1:]) + " --dry_run" + (
            " (on port 0: the port is busy here)" if attempt else "")
        report.check(rc == 0 and re.search(r"^ok\b", text, re.M), ct.where,
                     f"{ct.program} {shown}", f"exit {rc}: " + text.replace("\n", " | "))
        return


# ---------------------------------------------------------------------------------------------
# etcd, where it is installed (Debian's etcd-server: /usr/bin/etcd), and the coordinators on it.


def etcd_binary():
    return shutil.which("etcd") or next(
        (p for p in ("/usr/bin/etcd", "/usr/local/bin/etcd") if os.access(p, os.X_OK)), None)


def check_etcd_flags(members, report):
    """Every flag of the etcd containers is one etcd knows (etcd --help)."""
    binary = etcd_binary()
    for ct in members:
        if binary is None:
            report.skip(ct.where, "etcd knows every flag given", "no etcd installed here")
            continue
        out = subprocess.run([binary, "--help"], capture_output=True, text=True,
                             timeout=DRY_RUN_TIMEOUT_S)
        version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                                 timeout=DRY_RUN_TIMEOUT_S).stdout.split("\n")[0]
        known = set(re.findall(r"^\s+--([a-z0-9-]+)", out.stdout + out.stderr, re.M))
        unknown = sorted(f for f in ct.flags if f not in known)
        report.check(known and not unknown, ct.where,
                     f"etcd knows every flag given (the etcd here: {version})",
                     "unknown: " + ", ".join("--" + f for f in unknown))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout_s, interval_s=0.2):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval_s)


def check_failover_live(ct, job_text, opts, report, tmp_root):
    """The coordinators' command line and readiness probe on real processes: a one-member etcd on
    loopback, two coordinators with the container's flags (--listen, --advertise, --etcd and --job
    made local), the probe passing on the leader alone and failing on the standby, and the
    standby passing it within the lease TTL and a few seconds after the leader is SIGKILLed."""
    what = "readinessProbe on real coordinators: exactly one passes, the other fails as a standby"
    etcd, coordinator, ps_ctl = etcd_binary(), opts.binary("ps_coordinator"), opts.binary("ps_ctl")
    probe = probe_exec(ct.spec, "readinessProbe") or []
    if etcd is None or coordinator is None or ps_ctl is None or not probe:
        report.skip(ct.where, what, "needs etcd installed here, the built ps_coordinator and "
                    "ps_ctl, and an exec readiness probe")
        return
    coordinator, ps_ctl = os.path.abspath(coordinator), os.path.abspath(ps_ctl)
    root = tempfile.mkdtemp(dir=tmp_root, prefix="failover-")
    job = os.path.join(root, "job.pbtxt")
    with open(job, "w") as f:
        f.write(job_text)
    procs = []

    def start(argv, log):
        with open(os.path.join(root, log), "w") as out:
            procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                          cwd=root))
        return procs[-1]

    def run_probe(port):
        argv = [ps_ctl] + [f"--coordinator=localhost:{port}" if a.startswith("--coordinator=")
                           else a for a in probe[1:]]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            return out.returncode, (out.stdout + out.stderr).strip()
        except subprocess.TimeoutExpired:
            return None, "timed out"

    try:
        client, peer = free_port(), free_port()
        start([etcd, "--name=m0", f"--data-dir={root}/etcd",
               f"--listen-client-urls=http://127.0.0.1:{client}",
               f"--advertise-client-urls=http://127.0.0.1:{client}",
               f"--listen-peer-urls=http://127.0.0.1:{peer}",
               f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
               f"--initial-cluster=m0=http://127.0.0.1:{peer}"], "etcd.log")
        replaced = {"listen": "127.0.0.1:0", "advertise": "127.0.0.1",
                    "etcd": f"127.0.0.1:{client}", "job": job}
        coordinators = []
        for i in range(2):
            args = [a for a in ct.argv[1:] if parse_flags([a]).keys().isdisjoint(replaced)]
            args += [f"--{k}={v}" for k, v in replaced.items()]
            args += [f"--port_file={root}/port{i}", "--check_data=false"]
            coordinators.append(start([coordinator] + args, f"coordinator{i}.log"))

        def ports():
            try:
                return [int(open(f"{root}/port{i}").read().strip()) for i in range(2)]
            except (OSError, ValueError):
                return None
        port = wait_for(ports, 20)
        if not report.check(port, ct.where, "two coordinators start with its flags on a local "
                            "etcd", "they did not: " + " | ".join(
                open(os.path.join(root, f"coordinator{i}.log")).read()[-300:] for i in range(2))):
            return

        def one_leader():
            results = [run_probe(p) for p in port]
            passed = [i for i, r in enumerate(results) if r[0] == 0]
            return (passed[0], results) if len(passed) == 1 and "standby" in results[
                1 - passed[0]][1] else None
        found = wait_for(one_leader, 20)
        if not report.check(found, ct.where, what, "no moment with one coordinator passing and "
                            "the other failing as a standby"):
            return
        leader, results = found
        report.ok(ct.where,
                  f"readinessProbe: the standby's answer: {results[1 - leader][1][:120]}...")
        coordinators[leader].kill()
        start_s = time.monotonic()
        lease_s = int(ct.flags.get("lease_ttl_s", 2))
        took = wait_for(lambda: run_probe(port[1 - leader])[0] == 0, lease_s + 8)
        report.check(took, ct.where, f"readinessProbe: after the leader's SIGKILL the standby "
                     f"passes within {time.monotonic() - start_s:.1f} s (lease {lease_s} s)",
                     "it did not within the lease + 8 s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


# ---------------------------------------------------------------------------------------------
# kustomize itself, where kubectl is there.


def merge_order_free(obj, field=""):
    """The object with each list that strategic merges key (MERGE_KEYS) sorted by its key: the
    order in which a merge leaves their items means nothing to Kubernetes."""
    if isinstance(obj, dict):
        return {k: merge_order_free(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        items = [merge_order_free(x) for x in obj]
        key = MERGE_KEYS.get(field)
        if key:
            items.sort(key=lambda x: str(_merge_key_value(x, key)))
        return items
    return obj


def check_with_kubectl(manifests, renders, report, rel, tmp_root):
    """`kubectl kustomize` (kustomize itself, which may refuse what the renderer above allows)
    renders each kustomization, and renders the same objects as the renderer above. Skipped
    without kubectl; needs no cluster."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        report.skip(rel(manifests), "kubectl kustomize renders every kustomization as this test",
                    "no kubectl on PATH")
        return
    # A copy with the links resolved: Bazel's runfiles are links, which kustomize's rule of
    # files in or below the kustomization's folder would follow out of the tree.
    root = os.path.join(tmp_root, "kustomize")
    shutil.copytree(manifests, root)
    env = dict(os.environ, HOME=tmp_root, KUBECONFIG=os.devnull)
    for kdir, ours in renders:
        where = rel(os.path.join(kdir, "kustomization.yaml"))
        try:
            out = subprocess.run([kubectl, "kustomize", os.path.join(root, os.path.relpath(
                kdir, manifests))], capture_output=True, text=True, timeout=DRY_RUN_TIMEOUT_S,
                env=env)
            rc, text = out.returncode, out.stderr.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            rc, text = None, str(e)
        if not report.check(rc == 0, where, "kubectl kustomize renders it",
                            f"exit {rc}: " + text.replace(root + "/", "").replace("\n", " | ")):
            continue
        if ours is None:
            continue
        theirs = {(o.get("kind"), (o.get("metadata") or {}).get("name")): o
                  for o in yaml.safe_load_all(out.stdout) if o}
        mine = {(d.kind, d.name): d.obj for d in ours.docs}
        only_theirs = sorted(f"{k}/{n}" for k, n in set(theirs) - set(mine))
        only_mine = sorted(f"{k}/{n}" for k, n in set(mine) - set(theirs))
        report.check(not only_theirs and not only_mine, where,
                     f"kubectl kustomize renders the same {len(mine)} objects as this test",
                     f"only kustomize: {only_theirs}, only this test: {only_mine}")
        differ = sorted(f"{k}/{n}" for k, n in set(theirs) & set(mine)
                        if merge_order_free(theirs[(k, n)]) != merge_order_free(mine[(k, n)]))
        report.check(not differ, where, "and the same content", "differs: " + ", ".join(differ))


# ---------------------------------------------------------------------------------------------
# The Dockerfile.


def check_dockerfile(path, containers, report, rel):
    if not os.path.isfile(path):
        report.skip(rel(path), "the Dockerfile's checks", "no such file")
        return
    with open(path) as f:
        text = f.read()
    joined = re.sub(r"\\\n", " ", text)
    where = rel(path)
    report.check(re.search(r"^FROM\s+debian:12-slim\b", text, re.M), where,
                 "builds FROM debian:12-slim")
    env_path = None
    for line in joined.splitlines():
        if line.startswith("ENV "):
            m = re.search(r"\bPATH=(\S+)", line)
            if m:
                env_path = m.group(1).split(":")
    report.check(env_path is not None, where, "sets PATH")
    report.check(re.search(r"^ENV\s.*\bLD_LIBRARY_PATH=", joined, re.M), where,
                 "sets LD_LIBRARY_PATH")
    user = re.findall(r"^USER\s+(\S+)", text, re.M)
    uid = user[-1].split(":")[0] if user else None
    report.check(uid is not None and uid not in ("root", "0"), where,
                 f"runs as a user other than root ({uid})")
    comments = "\n".join(l for l in text.splitlines() if l.startswith("#"))
    programs = {ct.program for ct in containers if ct.ps_image}
    for ct in containers:
        if ct.ps_image:
            for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
                cmd = probe_exec(ct.spec, probe_name)
                if cmd:
                    programs.add(os.path.basename(cmd[0]))
    for program in sorted(programs & set(PROGRAMS)):
        rel_path = PROGRAMS[program]
        report.check(rel_path in comments, where,
                     f"its bundle command packs {rel_path}")
        ok = env_path is not None and any(p.rstrip("/").endswith("/bin/" + os.path.dirname(
            rel_path)) for p in env_path)
        report.check(ok, where, f"{program} is on PATH (bin/{os.path.dirname(rel_path)})")
    for ct in (ct for ct in containers if ct.ps_image):
        pod_uid = (ct.pod.get("securityContext") or {}).get("runAsUser")
        pod_uid = (ct.spec.get("securityContext") or {}).get("runAsUser", pod_uid)
        if pod_uid is not None:
            report.check(str(pod_uid) == uid, ct.where,
                         f"runAsUser {pod_uid} is the image's user {uid}")


# ---------------------------------------------------------------------------------------------


def local_address():
    """An address of this machine, as POD_IP is the pod's own: the one it would send from to
    10.0.0.5 (no packet is sent), or 127.0.0.1 without such a route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.0.0.5", 9))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifests", default=here, help="the folder of manifests")
    parser.add_argument("--dockerfile", default=None,
                        help="default: deploy/Dockerfile beside the manifests' folder")
    parser.add_argument("--bin_dir", default=os.environ.get("PS_BIN_DIR", ""),
                        help="the built binaries, laid out as in bazel-bin (env PS_BIN_DIR)")
    parser.add_argument("--pod_ip", default="",
                        help="the sample value of fieldRef status.podIP; default: this host's "
                        "address towards 10.0.0.5, else 127.0.0.1 (a worker binds its "
                        "advertised address, so it must be one of the machine's)")
    parser.add_argument("--rank", type=int, default=0,
                        help="the sample value of the Job's completion index")
    opts = parser.parse_args()
    if not opts.pod_ip:
        opts.pod_ip = local_address()
    manifests = os.path.abspath(opts.manifests)
    if not os.path.isdir(manifests):
        parser.error(f"--manifests={opts.manifests} is not a folder")
    if opts.bin_dir and not os.path.isdir(opts.bin_dir):
        parser.error(f"--bin_dir={opts.bin_dir} is not a folder")
    dockerfile = opts.dockerfile or os.path.join(os.path.dirname(manifests), "Dockerfile")
    repo = os.path.dirname(os.path.dirname(manifests))

    def rel(path):
        return os.path.relpath(path, repo)

    def binary(program):
        if not opts.bin_dir:
            return None
        path = os.path.join(opts.bin_dir, PROGRAMS[program])
        return path if os.access(path, os.X_OK) else None

    opts.binary = binary

    report = Report()
    tmp_root = tempfile.mkdtemp(prefix="manifests_test.", dir=os.environ.get("TEST_TMPDIR"))
    try:
        files = load_yaml_files(manifests, report, rel)
        kdirs = sorted(os.path.dirname(p) for p in files
                       if os.path.basename(p) == "kustomization.yaml")
        report.check(manifests in kdirs, rel(manifests), "has a kustomization.yaml")
        all_containers = []
        jobs_seen = []
        renders = []
        # The base first, so that the job file is known when sample-data's checks need it.
        for kdir in sorted(kdirs, key=lambda k: (k != manifests, k)):
            check_kustomization_files(kdir, files, report, rel)
            rendered = render(kdir, files, report, rel)
            renders.append((kdir, rendered))
            if rendered is None:
                continue
            containers = check_rendered(rendered, files, opts, report, rel, tmp_root, jobs_seen)
            for ct in containers:
                ct.doc_rendered = rendered
            run_binaries(containers, opts, report, tmp_root)
            all_containers += containers
        check_with_kubectl(manifests, renders, report, rel, tmp_root)
        check_dockerfile(dockerfile, all_containers, report, rel)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)

    print(f"{report.passed} passed, {report.failed} failed, {report.skipped} skipped")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
