"""Kafka config providers: `${file:path:key}`, `${env:VAR}`, `${dir:path:file}`.

MM2 resolves these through `config.providers` (names) and `config.providers.<name>.class`
(the implementation). Ferry implements Kafka's three built-in providers with their
semantics and limits (`allowed.paths`, `allowlist.pattern`), and refuses anything it cannot
resolve instead of passing the `${...}` text on to a client, where it would surface much
later as an authentication failure. Every value a provider yields is treated as secret.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ferry.config.findings import Findings
from ferry.config.properties import parse_properties

# Kafka's ConfigTransformer pattern: ${provider:[path:]key}
VARIABLE = re.compile(r"\$\{([^}]*?):(([^}]*?):)?([^}]*?)\}")

FILE_PROVIDER = "org.apache.kafka.common.config.provider.FileConfigProvider"
ENV_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
DIR_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
_KNOWN = {FILE_PROVIDER: "file", ENV_PROVIDER: "env", DIR_PROVIDER: "dir"}
_DECLARE_HINT = {
    "file": FILE_PROVIDER,
    "env": ENV_PROVIDER,
    "dir": DIR_PROVIDER,
}


@dataclass
class Providers:
    """The providers a config declares, ready to resolve variables.

    `base_dir` resolves relative paths (relative to the config file, which is what users
    mean; Java would use the working directory).
    """

    kinds: dict[str, str] = field(default_factory=dict)  # name -> file|env|dir
    params: dict[str, dict[str, str]] = field(default_factory=dict)
    base_dir: Path = field(default_factory=Path.cwd)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    _file_cache: dict[Path, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def declared(
        cls,
        props: Mapping[str, str],
        findings: Findings,
        base_dir: Path,
        env: Mapping[str, str] | None = None,
    ) -> Providers:
        """Read `config.providers*` from top-level properties; report bad declarations."""
        providers = cls(base_dir=base_dir, env=dict(os.environ) if env is None else env)
        names = [n.strip() for n in props.get("config.providers", "").split(",") if n.strip()]
        for name in names:
            class_key = f"config.providers.{name}.class"
            cls_name = props.get(class_key, "").strip()
            if not cls_name:
                findings.problem(class_key, "missing: the provider has no class",
                                 f"set it, e.g. {class_key}={FILE_PROVIDER}")
                continue
            kind = _KNOWN.get(cls_name)
            if kind is None:
                findings.problem(
                    class_key, "unknown config provider class", value=cls_name,
                    fix="Ferry supports Kafka's FileConfigProvider, EnvVarConfigProvider and "
                        "DirectoryConfigProvider; resolve other secrets into a file first")
                continue
            providers.kinds[name] = kind
            prefix = f"config.providers.{name}.param."
            providers.params[name] = {
                k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)
            }
        return providers

    def resolve(self, key: str, value: str, findings: Findings) -> tuple[str, bool]:
        """Substitute every variable in `value`.

        Returns the new value and whether any variable was substituted (such a value is
        secret). An unresolvable variable is a problem; the text is then left as it was.
        """
        used = False

        def substitute(match: re.Match[str]) -> str:
            nonlocal used
            name, path, var = match.group(1), match.group(3), match.group(4)
            resolved = self._lookup(key, name, path, var, findings)
            if resolved is None:
                return match.group(0)
            used = True
            return resolved

        return VARIABLE.sub(substitute, value), used

    def _lookup(
        self, key: str, name: str, path: str | None, var: str, findings: Findings
    ) -> str | None:
        ref = "${" + name + ":" + (f"{path}:" if path is not None else "") + var + "}"
        kind = self.kinds.get(name)
        if kind is None:
            cls = _DECLARE_HINT.get(name, FILE_PROVIDER)
            findings.problem(
                key, f"uses config provider {name!r}, which config.providers does not declare",
                value=ref,
                fix=f"add config.providers={name} and config.providers.{name}.class={cls}")
            return None
        if kind == "env":
            return self._env(key, name, path, var, ref, findings)
        if path is None:
            findings.problem(key, f"the {kind} provider needs a path", value=ref,
                             fix="write ${" + name + ":/path/to/file:key}")
            return None
        target = self._allowed(key, name, Path(path), ref, findings)
        if target is None:
            return None
        if kind == "dir":
            if var in ("", ".", "..") or "/" in var or "\\" in var:
                findings.problem(key, f"{var!r} is not a file name in {target}",
                                 value=ref, fix="name a file directly in the directory")
                return None
            return self._read(key, target / var, ref, findings)
        return self._file_key(key, target, var, ref, findings)

    def _env(self, key: str, name: str, path: str | None, var: str, ref: str,
             findings: Findings) -> str | None:
        if path:
            findings.problem(key, "the env provider takes no path", value=ref,
                             fix="write ${" + name + ":VARIABLE}")
            return None
        allow = self.params.get(name, {}).get("allowlist.pattern")
        try:
            allowed = allow is None or re.fullmatch(allow, var) is not None
        except re.error as exc:
            findings.problem(f"config.providers.{name}.param.allowlist.pattern",
                             f"invalid regular expression: {exc}", "fix the pattern", allow)
            return None
        if not allowed:
            findings.problem(key, f"environment variable {var} is not allowed by "
                             f"config.providers.{name}.param.allowlist.pattern",
                             value=ref, fix="widen the pattern or use another variable")
            return None
        if var not in self.env:
            findings.problem(key, f"environment variable {var} is not set", value=ref,
                             fix=f"export {var}=... before running ferry")
            return None
        return self.env[var]

    def _allowed(self, key: str, name: str, path: Path, ref: str,
                 findings: Findings) -> Path | None:
        target = path if path.is_absolute() else self.base_dir / path
        target = Path(os.path.normpath(target))
        allowed = self.params.get(name, {}).get("allowed.paths")
        if allowed:
            roots = [Path(os.path.normpath(p.strip())) for p in allowed.split(",") if p.strip()]
            if not any(target == r or r in target.parents for r in roots):
                findings.problem(key, f"{target} is outside "
                                 f"config.providers.{name}.param.allowed.paths",
                                 value=ref, fix="move the file or extend allowed.paths")
                return None
        return target

    def _read(self, key: str, path: Path, ref: str, findings: Findings) -> str | None:
        try:
            # Kafka's providers decode with replacement, never failing on a stray byte.
            return path.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            findings.problem(key, f"cannot read {path}: {exc.strerror or exc}",
                             value=ref, fix="create the file or correct the path")
            return None

    def _file_key(self, key: str, path: Path, var: str, ref: str,
                  findings: Findings) -> str | None:
        if path not in self._file_cache:
            text = self._read(key, path, ref, findings)
            if text is None:
                return None
            self._file_cache[path] = parse_properties(text)
        values = self._file_cache[path]
        if var not in values:
            findings.problem(key, f"{path} has no key {var!r}", value=ref,
                             fix=f"add {var}=... to {path}")
            return None
        return values[var]
