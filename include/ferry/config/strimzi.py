"""Map a Strimzi `KafkaMirrorMaker2` resource onto MM2 properties (and, through
`ferry.config.mm1`, a MirrorMaker 1 `KafkaMirrorMaker` resource).

Both API shapes are read: `v1beta2` (`spec.clusters[]`, mirrors with `sourceCluster` /
`targetCluster`) and `v1` (`spec.target`, mirrors with a `source` cluster). Kubernetes
secret references (`passwordSecret`, `certificateAndKey`, `trustedCertificates`,
`clientSecret`) become `${dir:<secrets dir>/<secretName>:<key>}` variables: the layout
Kubernetes uses when it mounts a secret as a volume. The secrets dir is
`$FERRY_SECRETS_DIR`, else `secrets/` beside the YAML file.

As Strimzi runs only the connectors a mirror declares: a `sourceConnector` enables the
flow, and heartbeats/checkpoints are on only with their connectors.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ferry.config import mm1
from ferry.config.findings import Findings
from ferry.config.mm1 import Translation
from ferry.config.providers import DIR_PROVIDER
from ferry.errors import ConfigError, Problem

STRIMZI_OFFSETS_TOPIC, STRIMZI_CONNECT_GROUP = "mirrormaker2-cluster-offsets", \
    "mirrormaker2-cluster"
"""What Strimzi's KafkaMirrorMaker2 Connect cluster uses unless its config says otherwise."""


def strimzi_properties(text: str, path: str, base_dir: Path, env: Mapping[str, str]
                       ) -> tuple[dict[str, str], Translation | None, dict[str, str]]:
    """MM2 properties equivalent to the resource, for a MirrorMaker 1 resource what each
    of its settings became, and where in the YAML each property came from (property ->
    YAML path, for problems found later: `yaml_terms`); ConfigError lists what is
    wrong."""
    doc = _mirror_resource(text, path)
    secrets = Path(env.get("FERRY_SECRETS_DIR") or base_dir / "secrets")
    mapper = _Mapper(secrets)
    mapper.resource(doc)
    if mapper.findings.problems:
        # all of them as found (raise_problems would also drop repeats)
        raise ConfigError(mapper.findings.problems, source=path)
    return mapper.props, mapper.translation, mapper.origins


def yaml_terms(error: ConfigError, origins: Mapping[str, str]) -> ConfigError:
    """`error` told in the resource's terms: a problem of a property the resource set names
    its YAML path, and its fix says `path: value` instead of `property=value`."""
    told = []
    for problem in error.problems:
        path = origins.get(problem.key)
        if path is not None:
            problem = Problem(path, problem.message, _in_yaml(problem.fix, problem.key, path),
                              problem.value)
        told.append(problem)
    return ConfigError(told, source=error.source)


def _in_yaml(fix: str, key: str, path: str) -> str:
    """`fix` with `key=value` as `path: value`, and `key` as `path`: the key as a whole word
    only, not inside a longer key it begins (`A->B.topics` in `A->B.topics.exclude`)."""
    word = rf"(?<![\w.>-]){re.escape(key)}(?![\w.])"
    fix = re.sub(word + "=", lambda _: f"{path}: ", fix)
    return re.sub(word, lambda _: path, fix)


MIRROR_KINDS = ("KafkaMirrorMaker2", "KafkaMirrorMaker")


def _mirror_resource(text: str, path: str) -> Any:
    """The file's one YAML document, or out of several (`---`, as `kubectl apply -f` takes:
    a Kafka, its users and a mirror) the one KafkaMirrorMaker2 or KafkaMirrorMaker.
    Several mirror resources in one file are refused, naming them."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError([Problem(path, f"is not valid YAML{where}",
                                   "fix the syntax")]) from None
    if len(docs) <= 1:
        return docs[0] if docs else None
    mirrors = [d for d in docs if isinstance(d, dict) and d.get("kind") in MIRROR_KINDS]
    if len(mirrors) == 1:
        return mirrors[0]
    kinds = ", ".join(f"{d.get('kind', '?')} {(d.get('metadata') or {}).get('name', '?')}"
                      if isinstance(d, dict) else "?" for d in docs)
    if not mirrors:
        raise ConfigError([Problem(path, f"holds {len(docs)} resources ({kinds}), none a "
                                         "KafkaMirrorMaker2 or KafkaMirrorMaker",
                                   "give the file that holds the mirror resource")])
    raise ConfigError([Problem(path, f"holds {len(mirrors)} mirror resources ({kinds})",
                               "give Ferry one mirror resource per file")])


class _Mapper:
    def __init__(self, secrets: Path) -> None:
        self.secrets = secrets
        self.props: dict[str, str] = {
            "config.providers": "dir",
            "config.providers.dir.class": DIR_PROVIDER,
            # Strimzi creates heartbeat connectors only where a mirror asks for one.
            "emit.heartbeats.enabled": "false",
        }
        self.findings = Findings()
        self.translation: Translation | None = None
        self.origins: dict[str, str] = {}
        """property -> the YAML path it came from"""

    def put(self, key: str, value: str, origin: str) -> None:
        self.props[key] = value
        self.origins[key] = origin

    def need(self, node: Mapping[str, Any], key: str, where: str) -> Any:
        value = node.get(key)
        if value in (None, ""):
            self.findings.problem(f"{where}.{key}", "missing", f"set {where}.{key}")
        return value

    def resource(self, doc: Any) -> None:
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if kind not in ("KafkaMirrorMaker2", "KafkaMirrorMaker"):
            self.findings.problem("kind", "not a KafkaMirrorMaker2 or KafkaMirrorMaker "
                                  "resource", "give an mm2.properties file, a Strimzi "
                                  "KafkaMirrorMaker2 or KafkaMirrorMaker YAML, or MM1's "
                                  "command line")
            return
        spec = doc.get("spec")
        if not isinstance(spec, dict):
            self.findings.problem("spec", "missing", "add the resource's spec")
            return
        if kind == "KafkaMirrorMaker":
            metadata = doc.get("metadata")
            name = metadata.get("name") if isinstance(metadata, dict) else None
            self.mirror_maker_1(spec, mm1.Names.of(str(name or "")))
            return
        clusters = list(spec.get("clusters") or [])
        named = [("spec.clusters", i, c) for i, c in enumerate(clusters)]
        if isinstance(spec.get("target"), dict):  # v1 API
            named.append(("spec", -1, spec["target"]))
        mirrors = list(spec.get("mirrors") or [])
        for i, mirror in enumerate(mirrors):
            if isinstance(mirror, dict) and isinstance(mirror.get("source"), dict):
                named.append((f"spec.mirrors[{i}]", -2, mirror["source"]))
        aliases: list[str] = []
        for base, index, cluster in named:
            where = f"{base}[{index}]" if index >= 0 else (
                f"{base}.target" if index == -1 else f"{base}.source")
            alias = self.cluster(cluster, where)
            if alias and alias not in aliases:
                aliases.append(alias)
        if not mirrors:
            self.findings.problem("spec.mirrors", "missing: nothing to mirror",
                                  "add a mirror with sourceCluster and targetCluster")
        target_alias = spec["target"].get("alias") if isinstance(spec.get("target"),
                                                                  dict) else None
        for i, mirror in enumerate(mirrors):
            self.mirror(mirror, f"spec.mirrors[{i}]", target_alias)
        self.props["clusters"] = ", ".join(aliases)
        self.connect_cluster(spec, target_alias)

    def connect_cluster(self, spec: Mapping[str, Any], target_alias: str | None) -> None:
        """Where the resource's Connect cluster keeps the connectors' progress and which
        group its workers join (`ferry adopt` reads them): the v1 API's `spec.target`
        fields, else the cluster's `config`, else Strimzi's defaults."""
        alias = spec.get("connectCluster") or target_alias
        if not alias:
            return
        target: Mapping[str, Any] = spec["target"] if isinstance(spec.get("target"), dict) \
            else {}
        for key, field, default in (
                ("offset.storage.topic", "offsetStorageTopic", STRIMZI_OFFSETS_TOPIC),
                ("group.id", "groupId", STRIMZI_CONNECT_GROUP)):
            if target.get(field):
                self.props[f"{alias}.{key}"] = str(target[field])
            self.props.setdefault(f"{alias}.{key}", default)

    def mirror_maker_1(self, spec: Mapping[str, Any], names: mm1.Names) -> None:
        """MM1's resource: `spec.consumer` is the source, `spec.producer` the target, one
        identity flow of `spec.include` (`whitelist` in v1beta1), named after the resource
        (`names`)."""
        done = self.translation = mm1.Translation("Strimzi KafkaMirrorMaker")
        self.props.pop("emit.heartbeats.enabled")
        for role, alias in (("consumer", names.source), ("producer", names.target)):
            where = f"spec.{role}"
            side = spec.get(role)
            if not isinstance(side, dict):
                self.findings.problem(where, "missing", f"add {where} with bootstrapServers")
                continue
            self.cluster({"alias": alias, **{k: side[k] for k in
                                             ("bootstrapServers", "tls", "authentication")
                                             if k in side}}, where)
            done.note(f"{where}.bootstrapServers", f"{alias}.bootstrap.servers")
            if side.get("authentication"):
                done.note(f"{where}.authentication",
                          f"{alias}'s SASL or TLS client settings (secrets read from "
                          f"{self.secrets})")
            if side.get("tls") is not None:
                done.note(f"{where}.tls", f"{alias}.ssl.truststore.* (PEM)")
            mm1.client_settings(role, alias, side.get("config") or {}, self.props, done,
                                f"{where}.config")
            for key, why in _MM1_FIELDS[role].items():
                if key in side:
                    done.note(f"{where}.{key}", why)
        consumer, producer = spec.get("consumer") or {}, spec.get("producer") or {}
        include = spec.get("include", spec.get("whitelist"))
        if not include:
            self.findings.problem("spec.include", "missing: nothing to mirror",
                                  "set spec.include (spec.whitelist in v1beta1)")
        else:
            done.note("spec.include" if "include" in spec else "spec.whitelist",
                      f"{names.flow}.topics = {mm1.java_list(include)}")
        streams = consumer.get("numStreams") if isinstance(consumer, dict) else None
        if streams is not None:
            done.note("spec.consumer.numStreams",
                      f"{names.flow}.tasks.max = {streams} (lanes)")
        if isinstance(producer, dict) and producer.get("abortOnSendFailure") is False:
            done.warnings.append(mm1.NEVER_DROPS.format(
                setting="spec.producer.abortOnSendFailure: false"))
        for key in sorted(set(spec) - {"consumer", "producer", "include", "whitelist"}):
            done.note(f"spec.{key}", "no meaning in Ferry: it configures MM1's pods; Ferry "
                      "runs in Airflow and Spark")
        self.props.update(mm1.flow_properties(names, include or "", streams, done))

    def cluster(self, cluster: Any, where: str) -> str | None:
        if not isinstance(cluster, dict):
            self.findings.problem(where, "must be a mapping", "see Strimzi's docs")
            return None
        alias = self.need(cluster, "alias", where)
        bootstrap = self.need(cluster, "bootstrapServers", where)
        if not alias:
            return None
        alias = str(alias)
        if bootstrap:
            self.put(f"{alias}.bootstrap.servers", str(bootstrap), f"{where}.bootstrapServers")
        tls = cluster.get("tls")
        auth = cluster.get("authentication") or {}
        sasl = self.authentication(alias, auth, f"{where}.authentication", tls is not None)
        if tls is not None:
            self.trusted(alias, tls or {}, f"{where}.tls")
        protocol = ("SASL_" if sasl else "") + ("SSL" if tls is not None else "PLAINTEXT")
        self.props[f"{alias}.security.protocol"] = protocol
        for key, value in (cluster.get("config") or {}).items():
            self.put(f"{alias}.{key}", mm1.text_of(value), f"{where}.config.{key}")
        return alias

    def secret(self, ref: Any, key_field: str, where: str) -> str | None:
        if not isinstance(ref, dict) or not ref.get("secretName") or not ref.get(key_field):
            self.findings.problem(where, f"needs secretName and {key_field}",
                                  f"set {where}.secretName and {where}.{key_field}")
            return None
        return "${dir:" + str(self.secrets / str(ref["secretName"])) + ":" + \
            str(ref[key_field]) + "}"

    def authentication(self, alias: str, auth: Mapping[str, Any], where: str,
                       tls: bool) -> bool:
        kind = str(auth.get("type", "")).lower()
        if not kind:
            return False
        if kind in ("scram-sha-512", "scram-sha-256", "plain"):
            user = self.need(auth, "username", where)
            password = self.secret(auth.get("passwordSecret"), "password",
                                   f"{where}.passwordSecret")
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                      if kind == "plain" else
                      "org.apache.kafka.common.security.scram.ScramLoginModule")
            self.props[f"{alias}.sasl.mechanism"] = kind.upper()
            if user and password:
                self.put(f"{alias}.sasl.jaas.config",
                         f'{module} required username="{user}" password="{password}";',
                         f"{where}.passwordSecret")
            return True
        if kind == "tls":
            if not tls:
                self.findings.problem(f"{where}.type", "tls authentication needs tls",
                                      "add tls: {trustedCertificates: [...]}")
            ref = auth.get("certificateAndKey")
            cert = self.secret(ref, "certificate", f"{where}.certificateAndKey")
            key = self.secret(ref, "key", f"{where}.certificateAndKey")
            if cert and key:
                self.props[f"{alias}.ssl.keystore.type"] = "PEM"
                self.props[f"{alias}.ssl.keystore.certificate.chain"] = cert
                self.props[f"{alias}.ssl.keystore.key"] = key
            return False
        if kind == "oauth":
            endpoint = self.need(auth, "tokenEndpointUri", where)
            client_id = self.need(auth, "clientId", where)
            secret = self.secret(auth.get("clientSecret"), "key", f"{where}.clientSecret")
            scope = f' scope="{auth["scope"]}"' if auth.get("scope") else ""
            self.props[f"{alias}.sasl.mechanism"] = "OAUTHBEARER"
            self.props[f"{alias}.sasl.login.callback.handler.class"] = (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler")
            if endpoint:
                self.props[f"{alias}.sasl.oauthbearer.token.endpoint.url"] = str(endpoint)
            if client_id and secret:
                self.props[f"{alias}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                    f'required clientId="{client_id}" clientSecret="{secret}"{scope};')
            return True
        self.findings.problem(f"{where}.type", f"unsupported authentication {kind!r}",
                              "use scram-sha-512, scram-sha-256, plain, tls or oauth")
        return False

    def trusted(self, alias: str, tls: Mapping[str, Any], where: str) -> None:
        refs: list[str] = []
        for i, cert in enumerate(tls.get("trustedCertificates") or []):
            here = f"{where}.trustedCertificates[{i}]"
            if isinstance(cert, dict) and cert.get("pattern") and cert.get("secretName"):
                folder = self.secrets / str(cert["secretName"])
                files = sorted(p.name for p in folder.glob("*")
                               if fnmatch.fnmatch(p.name, str(cert["pattern"])))
                if not files:
                    self.findings.problem(here, f"no file in {folder} matches "
                                          f"{cert['pattern']!r}",
                                          "mount the secret there or set "
                                          "FERRY_SECRETS_DIR")
                refs += ["${dir:" + str(folder) + ":" + f + "}" for f in files]
                continue
            ref = self.secret(cert, "certificate", here)
            if ref:
                refs.append(ref)
        if refs:
            self.props[f"{alias}.ssl.truststore.type"] = "PEM"
            self.put(f"{alias}.ssl.truststore.certificates", "\n".join(refs),
                     f"{where}.trustedCertificates")

    def mirror(self, mirror: Any, where: str, target_alias: str | None) -> None:
        if not isinstance(mirror, dict):
            self.findings.problem(where, "must be a mapping", "see Strimzi's docs")
            return
        source = mirror.get("sourceCluster") or (mirror.get("source") or {}).get("alias")
        target = mirror.get("targetCluster") or target_alias
        if not source or not target:
            self.findings.problem(where, "needs sourceCluster and targetCluster",
                                  f"set {where}.sourceCluster and .targetCluster")
            return
        flow = f"{source}->{target}"
        connectors = {
            "sourceConnector": "enabled",
            "heartbeatConnector": "emit.heartbeats.enabled",
            "checkpointConnector": "emit.checkpoints.enabled",
        }
        for name, switch in connectors.items():
            connector = mirror.get(name)
            self.props[f"{flow}.{switch}"] = "true" if connector is not None else "false"
            if not isinstance(connector, dict):
                continue
            if name == "sourceConnector" and connector.get("tasksMax") is not None:
                self.put(f"{flow}.tasks.max", mm1.text_of(connector["tasksMax"]),
                         f"{where}.{name}.tasksMax")
            for key, value in (connector.get("config") or {}).items():
                # Each connector's config is its own: the data clients are the source
                # connector's, so other connectors' client settings must not leak into them.
                if name != "sourceConnector" and key.startswith(_CLIENT_PREFIXES):
                    continue
                self.put(f"{flow}.{key}", mm1.text_of(value), f"{where}.{name}.config.{key}")
        # Strimzi puts the patterns after the connector config: they win.
        patterns = {
            "topics": ("topicsPattern",),
            "topics.exclude": ("topicsExcludePattern", "topicsBlacklistPattern"),
            "groups": ("groupsPattern",),
            "groups.exclude": ("groupsExcludePattern", "groupsBlacklistPattern"),
        }
        for key, fields in patterns.items():
            field = next((f for f in fields if mirror.get(f) is not None), None)
            if field is not None:
                self.put(f"{flow}.{key}", str(mirror[field]), f"{where}.{field}")


_MM1_FIELDS = {
    "consumer": {
        "groupId": "no meaning in Ferry: MM1's consumer group, where its progress is; Ferry "
                   "keeps its own positions",
        "offsetCommitInterval": mm1.COMMIT_INTERVAL,
    },
    "producer": {
        "abortOnSendFailure": mm1.ABORT_ON_SEND,
    },
}

_CLIENT_PREFIXES = ("consumer.", "producer.", "admin.", "source.", "target.")
