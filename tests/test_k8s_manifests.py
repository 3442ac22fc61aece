"""The manifest source's parsing (lightkube models) and the kuryr driver's labels."""

from __future__ import annotations

from pathlib import Path

import pytest

from netbay.coe import labels
from netbay.coe.fragments import NETWORK_DRIVERS
from netbay.errors import BadRequest
from netbay.k8s.objects import Key, ManifestError, desired, key_of, load_paths, parse, selects
from netbay.k8s.podenv import EnvVar
from tests import zygote

DEPLOY = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: busybox, ports: [{name: http, containerPort: 8080}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {type: LoadBalancer, selector: {app: web}, ports: [{port: 80, targetPort: http, protocol: UDP}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: shop}
spec: {podSelector: {}, policyTypes: [Ingress]}
"""


def test_deployment_expands_into_its_replicas_and_service_facts() -> None:
    want = desired(parse(DEPLOY))
    assert sorted(want.pods) == [("shop", "web-0"), ("shop", "web-1"), ("shop", "web-2")]
    assert want.pods[("shop", "web-1")].ports == {"http": 8080}
    assert set(want.namespaces) == {"shop"}  # implied by the namespaced objects
    svc = want.services[("shop", "web")]
    assert (svc.type, svc.ports[0].protocol, svc.ports[0].target, svc.cluster_ip) == ("LoadBalancer", "UDP", "http", None)
    assert [p["metadata"]["name"] for p in want.policies] == ["deny"]
    assert selects({"app": "web"}, {"app": "web", "x": "y"}) and not selects({}, {"app": "web"})
    assert not selects(None, {"app": "web"})


def test_scale_to_zero_and_keys() -> None:
    bodies = parse(DEPLOY.replace("replicas: 3", "replicas: 0"))
    assert desired(bodies).pods == {}
    assert key_of(bodies[0]) == Key("Deployment", "shop", "web")
    ns = parse("apiVersion: v1\nkind: Namespace\nmetadata: {name: a, labels: {team: x}}\n")[0]
    assert key_of(ns) == Key("Namespace", "", "a") and desired([ns]).namespaces == {"a": {"team": "x"}}


@pytest.mark.parametrize("text, message", [
    ("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: c}\n", "kind ServiceAccount is not mapped"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {namespace: a}\n", "without metadata.name"),
    ("apiVersion: v1\nkind: Nonsense\nmetadata: {name: c}\n", "Nonsense"),
    ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {clusterIP: 10.0.0, ports: [{port: 1}]}\n",
     "is not an IPv4 or IPv6 address"),
    ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 1, protocol: DCCP}]}\n",
     r"DCCP is not supported \(TCP, UDP, SCTP\)"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {netbay.io/runtime: vm}}\n"
     "spec: {containers: [{name: c, image: busybox}]}\n", "netbay.io/runtime='vm' is not one of sandbox, docker"),
])
def test_refused_manifests_say_why(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        desired(parse(text, "m.yaml"))


def test_refused_at_parse_before_anything_is_stored() -> None:
    """The mapping's own checks run at parse: a refused object never reaches the store
    (where every later pass would trip on it)."""
    with pytest.raises(ManifestError, match="m.yaml: .*is not an IPv4 or IPv6 address"):
        parse("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {clusterIP: x, ports: [{port: 1}]}\n",
              "m.yaml")


def test_a_pods_runtime_and_first_container() -> None:
    """What a Docker-runtime pod runs: the first container's image, command (Docker's
    entrypoint), args, env as written (resolved at container start); the runtime
    annotation of the template."""
    text = DEPLOY.replace("    metadata: {labels: {app: web}}\n",
                          "    metadata: {labels: {app: web}, annotations: {netbay.io/runtime: docker}}\n").replace(
        "image: busybox,", "image: 'busybox:1', command: [sh, -c], args: ['echo $A'], "
        "env: [{name: A, value: '1'}, {name: B, valueFrom: {fieldRef: {fieldPath: metadata.name}}}],")
    pod = desired(parse(text)).pods[("shop", "web-2")]
    assert pod.runtime == "docker"
    c = pod.container
    assert (c.image, c.command, c.args, c.env, c.pull, c.restart) == \
        ("busybox:1", ("sh", "-c"), ("echo $A",), (EnvVar("A", "1"), EnvVar("B", field_path="metadata.name")),
         "IfNotPresent", "Always")
    plain = desired(parse(DEPLOY)).pods[("shop", "web-0")]
    assert plain.runtime is None and plain.container.command is None and plain.container.args is None


def test_a_directory_is_read_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n")
    (tmp_path / "a.yml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
    (tmp_path / "notes.txt").write_text("not a manifest")
    assert [b["metadata"]["name"] for b in load_paths([tmp_path])] == ["a", "b"]
    with pytest.raises(ManifestError, match="No such file"):
        load_paths([tmp_path / "missing.yaml"])


def test_dash_is_standard_input_bounded_and_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from netbay.k8s import objects

    ns = b"apiVersion: v1\nkind: Namespace\nmetadata: {name: piped}\n"
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: filed}\n")
    got = load_paths(["-", tmp_path / "a.yaml"], stdin=io.BytesIO(ns))
    assert [b["metadata"]["name"] for b in got] == ["piped", "filed"]
    with pytest.raises(ManifestError, match="standard input can be given once"):
        load_paths(["-", "-"], stdin=io.BytesIO(ns))
    monkeypatch.setattr(objects, "MAX_MANIFEST_BYTES", 64)
    with pytest.raises(ManifestError, match="<stdin>: larger than"):
        load_paths(["-"], stdin=io.BytesIO(ns + b"#" * 64))
    (tmp_path / "big.yaml").write_bytes(ns + b"#" * 64)
    with pytest.raises(ManifestError, match="big.yaml: larger than"):
        load_paths([tmp_path / "big.yaml"])
    with pytest.raises(ManifestError, match="not UTF-8"):
        load_paths(["-"], stdin=io.BytesIO(b"\xff\xfe"))


def test_kuryr_labels_are_checked_and_the_driver_has_a_fragment() -> None:
    assert "kuryr" in NETWORK_DRIVERS
    labels.check({"kuryr_subnet_driver": "node", "kuryr_pod_subnet_prefixlen": 26}, "kuryr")
    with pytest.raises(BadRequest, match="expecting one of namespace|node"):
        labels.check({"kuryr_subnet_driver": "pod"}, "kuryr")
    labels.check({"kuryr_pod_runtime": "docker"}, "kuryr")
    with pytest.raises(BadRequest, match="expecting one of sandbox|docker"):
        labels.check({"kuryr_pod_runtime": "vm"}, "kuryr")
    with pytest.raises(BadRequest, match="overlap"):
        labels.check({"kuryr_service_cidr": "10.10.128.0/20"}, "kuryr")
    with pytest.raises(BadRequest, match="must be longer than the prefix"):
        labels.check({"kuryr_pod_subnet_pool": "10.10.0.0/24", "kuryr_pod_subnet_prefixlen": 24}, "kuryr")


def test_cli_refuses_a_bad_manifest_before_touching_anything(tmp_path: Path) -> None:
    import sys

    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: c}\n")
    r = zygote.run([sys.executable, "-m", "netbay.cli.main", "k8s", "apply", "-f", str(bad), "--cluster", "x"],
                   capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 1
    assert "kind ServiceAccount is not mapped" in r.stderr.replace("\n", " ")


# --- a pod's environment: env, envFrom, valueFrom, $(VAR) (netbay.k8s.podenv) ---------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from netbay.k8s.podenv import ConfigError, EnvFrom, KeyRef, PodFacts, escape, expand, launch  # noqa: E402

ENV_POD = """
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: e}
data: {mode: fast, "1bad": x, dotted.key: y}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: e}
data: {password: aHVudGVyMg==}
stringData: {user: alice, "2fa": "on"}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: e, uid: 3f0c, labels: {app: a}, annotations: {team: blue}}
spec:
  serviceAccountName: robot
  containers:
  - name: c
    image: busybox
    command: [sh, -c]
    args: ["echo $(MODE) $$(MODE) $(NOPE) $(WEB_SERVICE_HOST)"]
    envFrom:
    - configMapRef: {name: cfg}
      prefix: CFG_
    - secretRef: {name: creds}
    env:
    - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: APP, valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}}
    - {name: TEAM, valueFrom: {fieldRef: {fieldPath: "metadata.annotations['team']"}}}
    - {name: SA, valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}}
    - {name: UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}
    - {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
    - {name: HOST_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}
    - {name: MODE, valueFrom: {configMapKeyRef: {name: cfg, key: mode}}}
    - {name: PASS, valueFrom: {secretKeyRef: {name: creds, key: password}}}
    - {name: user, value: "overridden $(user) at $(POD_IP) before $(LATER)"}
    - {name: MAYBE, valueFrom: {configMapKeyRef: {name: cfg, key: absent, optional: true}}}
    - {name: MAYBE_NOT, valueFrom: {secretKeyRef: {name: nowhere, key: k, optional: true}}}
    - {name: LATER, value: late}
    - {name: URL, value: "http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)/"}
"""
FACTS = dict(node="node-0", host_ips=("10.0.0.5",), pod_ips=("10.50.0.7",))


def env_launch(want, pod_key=("e", "p"), service_env=None):
    pod = want.pods[pod_key]
    facts = PodFacts(pod.name, pod.namespace, pod.uid or "", pod.labels, pod.annotations,
                     service_account=pod.service_account, **FACTS)
    c = pod.container
    return launch(c.env, c.env_from, c.command, c.args, facts, want.configmaps, want.secrets,
                  service_env if service_env is not None else {"WEB_SERVICE_HOST": "10.252.0.9",
                                                               "WEB_SERVICE_PORT": "80"})


def test_configmaps_and_secrets_are_desired_state() -> None:
    want = desired(parse(ENV_POD))
    assert want.configmaps == {("e", "cfg"): {"mode": "fast", "1bad": "x", "dotted.key": "y"}}
    # data decoded, stringData over it
    assert want.secrets == {("e", "creds"): {"password": "hunter2", "user": "alice", "2fa": "on"}}
    assert want.pods[("e", "p")].container.env_from == (
        EnvFrom(KeyRef("ConfigMap", "cfg"), "CFG_"), EnvFrom(KeyRef("Secret", "creds")))
    with pytest.raises(ManifestError, match=r"Secret/e/s: data\[k\]: Invalid value: not base64"):
        parse("apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: e}\ndata: {k: '%%%'}\n")


def test_a_pods_environment_as_a_kubelet_makes_it() -> None:
    run = env_launch(desired(parse(ENV_POD)))
    env = run.environment
    assert {k: env[k] for k in ("POD_IP", "NAME", "APP", "TEAM", "SA", "UID", "NODE", "HOST_IP", "MODE", "PASS")} == {
        "POD_IP": "10.50.0.7", "NAME": "p", "APP": "a", "TEAM": "blue", "SA": "robot", "UID": "3f0c",
        "NODE": "node-0", "HOST_IP": "10.0.0.5", "MODE": "fast", "PASS": "hunter2"}
    # envFrom: every key (with its prefix: CFG_1bad is a name), invalid names skipped with kubelet's
    # warning; env wins over it, a value sees the entries before it (envFrom's too), not those after.
    assert (env["CFG_mode"], env["CFG_dotted.key"], env["CFG_1bad"]) == ("fast", "y", "x") and "2fa" not in env
    assert env["user"] == "overridden alice at 10.50.0.7 before $(LATER)"
    assert [w.split(":")[0] for w in run.warnings] == ["InvalidEnvironmentVariableNames"]
    assert "Keys 2fa from the EnvFrom secret e/creds were skipped" in run.warnings[0]
    assert "MAYBE" not in env and "MAYBE_NOT" not in env   # optional: omitted
    # The Service variables: in the environment and in the expansion.
    assert env["URL"] == "http://10.252.0.9:80/" and env["WEB_SERVICE_HOST"] == "10.252.0.9"
    # command and args: expanded with all of it; $$ escapes; an unknown name stays literal.
    assert run.command == ["sh", "-c"]
    assert run.args == ["echo fast $(MODE) $(NOPE) 10.252.0.9"]
    # No Service variables: the reference stays as written.
    assert env_launch(desired(parse(ENV_POD)), service_env={}).environment["URL"] == \
        "http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)/"


@pytest.mark.parametrize("edit, error", [
    (("name: cfg, namespace: e}\ndata:", "name: other, namespace: e}\ndata:"), 'configmap "cfg" not found'),
    (("name: creds, namespace: e}", "name: other, namespace: e}"), 'secret "creds" not found'),
    (("{mode: fast,", "{speed: fast,"), "couldn't find key mode in ConfigMap e/cfg"),
    (("{password: aHVudGVyMg==}", "{pw: aHVudGVyMg==}"), "couldn't find key password in Secret e/creds"),
])
def test_a_missing_reference_is_a_create_container_config_error(edit: tuple[str, str], error: str) -> None:
    with pytest.raises(ConfigError) as exc:
        env_launch(desired(parse(ENV_POD.replace(*edit))))
    assert str(exc.value) == error


def test_a_pod_without_env_runs_as_written_and_a_changed_configmap_is_seen_by_the_next_launch() -> None:
    want = desired(parse(DEPLOY))
    pod = want.pods[("shop", "web-0")]
    run = launch((), (), None, None, PodFacts("web-0", "shop", ""), {}, {}, {})
    assert (pod.container.env, pod.container.env_from, run.environment, run.command, run.args) == \
        ((), (), {}, None, None)
    assert env_launch(desired(parse(ENV_POD.replace("mode: fast", "mode: slow")))).environment["MODE"] == "slow"


@pytest.mark.parametrize("entry, message", [
    ("{name: 1A, value: x}", r"name: Invalid value: '1A': a valid environment variable name"),
    ("{name: A, value: x, valueFrom: {fieldRef: {fieldPath: metadata.name}}}",
     "may not be specified when `value` is not empty"),
    ("{name: A, valueFrom: {fieldRef: {fieldPath: status.phase}}}",
     r"valueFrom.fieldRef.fieldPath: Unsupported value: 'status.phase'"),
    ("{name: A, valueFrom: {fieldRef: {fieldPath: metadata.labels}}}", "Unsupported value: 'metadata.labels'"),
    ("{name: A, valueFrom: {fieldRef: {apiVersion: v2, fieldPath: metadata.name}}}", "apiVersion: Unsupported value"),
    ("{name: A, valueFrom: {resourceFieldRef: {resource: limits.cpu}}}",
     r"valueFrom.resourceFieldRef: not supported by netbay's pods"),
    ("{name: A, valueFrom: {configMapKeyRef: {name: c, key: k}, secretKeyRef: {name: s, key: k}}}",
     "may not have more than one field specified at a time"),
    ("{name: A, valueFrom: {}}", "must specify one of"),
    ("{name: A, valueFrom: {configMapKeyRef: {name: c, key: ''}}}", r"configMapKeyRef.key: Required value"),
    ("{name: A, valueFrom: {secretKeyRef: {key: k}}}", r"secretKeyRef.name: Required value"),
    ("{name: A, valueFrom: {configMapKeyRef: {name: c, key: 'a/b'}}}", "a valid config key"),
])
def test_env_entries_the_api_server_refuses_are_refused_at_parse(entry: str, message: str) -> None:
    text = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
            f"spec: {{containers: [{{name: c, image: x, env: [{entry}]}}]}}\n")
    with pytest.raises(ManifestError, match=r"m.yaml: Pod/default/p: spec.containers\[0\]\.env\[0\].*" + message):
        parse(text, "m.yaml")


@pytest.mark.parametrize("entry, message", [
    ("{configMapRef: {name: c}, secretRef: {name: s}}", "may not have more than one field"),
    ("{prefix: P_}", "must specify one of: `configMapRef` or `secretRef`"),
    ("{prefix: '9x', configMapRef: {name: c}}", r"envFrom\[0\].prefix: Invalid value: '9x'"),
    ("{secretRef: {optional: true}}", r"envFrom\[0\].secretRef.name: Required value"),
])
def test_env_from_entries_refused(entry: str, message: str) -> None:
    text = (f"apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d}}\nspec:\n  selector: {{}}\n  template:\n"
            f"    spec: {{containers: [{{name: c, image: x}}, {{name: s, image: x, envFrom: [{entry}]}}]}}\n")
    with pytest.raises(ManifestError, match=r"Pod/default/d-0: spec.containers\[1\]\..*" + message):
        parse(text)


@pytest.mark.parametrize("text, out", [
    ("$(A)", "a"), ("___$(B)___", "___b___"), ("$(A)-$(A)", "a-a"), ("$$(B)_$(A)", "$(B)_a"),
    ("$$$(A)", "$a"), ("$(NOPE)", "$(NOPE)"), ("$(A", "$(A"), ("$A", "$A"), ("$$", "$"), ("$", "$"),
    ("foo$()bar", "foo$()bar"), ("$$$$", "$$"), ("$(A)$$$(B)", "a$b"), ("$($(A))", "$($(A))"), ("x$", "x$"),
])
def test_expansion_cases_of_kubernetes(text: str, out: str) -> None:
    assert expand(text, {"A": "a", "B": "b"}.get) == out


@given(st.text())
def test_an_escaped_string_expands_to_itself(s: str) -> None:
    assert expand(escape(s), lambda _: "never") == s


@given(st.text().filter(lambda s: "$$" not in s))
def test_unknown_references_stay_literal(s: str) -> None:
    assert expand(s, lambda _: None) == s


NAMES = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)


@given(st.lists(st.one_of(st.tuples(st.just("text"), st.text().map(lambda t: t.replace("$", ""))),
                          st.tuples(st.just("ref"), NAMES)), max_size=8),
       st.dictionaries(NAMES, st.text(), max_size=4))
def test_references_are_replaced_by_their_values_and_nothing_else(parts: list, values: dict) -> None:
    text = "".join(v if kind == "text" else f"$({v})" for kind, v in parts)
    want = "".join(v if kind == "text" else values.get(v, f"$({v})") for kind, v in parts)
    assert expand(text, values.get) == want


def test_what_restarts_a_docker_pod_is_its_template_not_the_configmap_it_reads() -> None:
    """The app container is replaced when its spec hash changes: a changed env entry does
    it, a changed ConfigMap does not (Kubernetes restarts no pod for it); a pod with plain
    values only hashes as before env sources existed (an upgrade restarts nothing)."""
    import hashlib
    import json

    from netbay.k8s.dockerpods import spec_hash

    def h(text: str, key: tuple[str, str] = ("e", "p")) -> str:
        return spec_hash(desired(parse(text)).pods[key].container, "sandbox-id")

    base = h(ENV_POD)
    assert h(ENV_POD.replace("mode: fast", "mode: slow")) == base
    assert h(ENV_POD.replace("{name: LATER, value: late}", "{name: LATER, value: later}")) != base
    assert h(ENV_POD.replace("prefix: CFG_", "prefix: C_")) != base
    plain = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: busybox, "
             "command: [sleep], args: ['1'], env: [{name: B, value: '2'}, {name: A, value: '1'}]}]}\n")
    before = json.dumps(["busybox", ["sleep"], ["1"], [["A", "1"], ["B", "2"]], "Always", "sandbox-id"])
    assert h(plain, ("default", "p")) == hashlib.sha256(before.encode()).hexdigest()[:16]


REPLICASET = """
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: api, namespace: shop, labels: {owner: rs}}
spec:
  replicas: 3
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api, tier: back}}
    spec: {containers: [{name: c, image: busybox, ports: [{name: http, containerPort: 9090}]}]}
"""


def test_a_replicaset_expands_into_its_replicas_and_scales() -> None:
    bodies = parse(REPLICASET)
    assert key_of(bodies[0]) == Key("ReplicaSet", "shop", "api")
    pods = desired(bodies).pods
    assert sorted(pods) == [("shop", "api-0"), ("shop", "api-1"), ("shop", "api-2")]
    for pod in pods.values():   # the template's labels and ports, not the ReplicaSet's own
        assert pod.labels == {"app": "api", "tier": "back"} and pod.ports == {"http": 9090}
    assert sorted(desired(parse(REPLICASET.replace("replicas: 3", "replicas: 5"))).pods) == \
        [("shop", f"api-{i}") for i in range(5)]
    assert sorted(desired(parse(REPLICASET.replace("replicas: 3", "replicas: 1"))).pods) == [("shop", "api-0")]
    assert desired(parse(REPLICASET.replace("replicas: 3", "replicas: 0"))).pods == {}


def _pod_text(name: str, conditions: str | None) -> str:
    status = f"status: {{phase: Running, conditions: {conditions}}}\n" if conditions is not None else ""
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop, labels: {{app: web}}}}\n"
            f"spec: {{containers: [{{name: c, image: busybox, ports: [{{name: http, containerPort: 8080}}]}}]}}\n"
            + status)


def _port(ip: str) -> dict:
    return {"fixed_ips": [{"ip_address": ip, "subnet_id": "s1"}]}


READY_PODS = "---\n".join([
    _pod_text("own", None),                                             # netbay runs it: ready once plugged
    _pod_text("ready", "[{type: PodScheduled, status: 'True'}, {type: Ready, status: 'True'}]"),
    _pod_text("notready", "[{type: PodScheduled, status: 'True'}, {type: Ready, status: 'False'}]"),
    _pod_text("starting", "[{type: PodScheduled, status: 'True'}]"),     # reported on, not Ready yet
])
WEB = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n" \
      "spec: {selector: {app: web}, ports: [{name: http, port: 80, targetPort: http}]}\n"


@pytest.mark.parametrize("publish, members", [
    (False, ["10.0.0.1", "10.0.0.2"]),
    (True, ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]),
])
def test_members_are_the_ready_pods(publish: bool, members: list[str]) -> None:
    from netbay.k8s import services
    from netbay.k8s.dns import records

    svc_text = WEB.replace("spec: {", "spec: {publishNotReadyAddresses: true, ") if publish else WEB
    want = desired(parse(READY_PODS + "---\n" + svc_text))
    assert [want.pods[("shop", n)].ready for n in ("own", "ready", "notready", "starting")] == \
        [True, True, False, False]
    ports = {("shop", n): _port(f"10.0.0.{i}") for i, n in enumerate(("own", "ready", "notready", "starting"), 1)}
    svc = want.services[("shop", "web")]
    got = services.members(svc, svc.ports[0], want, ports)
    assert [m["address"] for m in got] == members and {m["protocol_port"] for m in got} == {8080}
    # A headless Service's DNS names the same endpoints.
    headless = desired(parse(READY_PODS + "---\n" + svc_text.replace("spec: {", "spec: {clusterIP: None, ")))
    ports = {k: {**p, "device_id": "d"} for k, p in ports.items()}
    assert records.endpoints(headless.services[("shop", "web")], headless, ports) == members


def test_not_ready_addresses_of_endpoints_are_no_members() -> None:
    from netbay.k8s import services

    want = desired(parse(
        "apiVersion: v1\nkind: Service\nmetadata: {name: ext, namespace: shop}\nspec: {ports: [{port: 80}]}\n---\n"
        "apiVersion: v1\nkind: Endpoints\nmetadata: {name: ext, namespace: shop}\n"
        "subsets: [{addresses: [{ip: 192.0.2.10}, {ip: 192.0.2.11}], notReadyAddresses: [{ip: 192.0.2.12}],"
        " ports: [{port: 8080}]}, {notReadyAddresses: [{ip: 192.0.2.13}], ports: [{port: 8080}]}]\n"))
    svc = want.services[("shop", "ext")]
    assert services.members(svc, svc.ports[0], want, {}) == [
        {"address": "192.0.2.10", "protocol_port": 8080}, {"address": "192.0.2.11", "protocol_port": 8080}]
