"""Config providers: ${file:...}, ${env:...}, ${dir:...} with Kafka's semantics."""

from __future__ import annotations

import pytest

from ferry.errors import ConfigError
from ferry.secrets import Secret
from tests.unit.conftest import BASE, Loader

PROVIDERS = """
config.providers = file, env, dir
config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider
config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider
config.providers.dir.class = org.apache.kafka.common.config.provider.DirectoryConfigProvider
"""
SASL = """
A.security.protocol = SASL_PLAINTEXT
A.sasl.mechanism = PLAIN
"""


def test_file_provider_reads_a_key_from_a_properties_file(load: Loader) -> None:
    text = BASE + PROVIDERS + SASL + (
        'A.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule '
        'required username="${file:secrets/a.properties:user}" '
        'password="${file:secrets/a.properties:password}";\n')
    config = load(text, files={"secrets/a.properties": "user=alice\npassword=s3cret-pw\n"})
    settings = config.flow("A->B").consumer.settings
    assert settings["sasl.username"] == "alice"
    assert isinstance(settings["sasl.password"], Secret)
    assert settings["sasl.password"].reveal() == "s3cret-pw"


def test_env_provider(load: Loader) -> None:
    text = BASE + PROVIDERS + "B.bootstrap.servers = ${env:B_BOOTSTRAP}\n"
    config = load(text, env={"B_BOOTSTRAP": "envhost:9092"})
    assert config.clusters["B"].bootstrap_servers == "envhost:9092"


def test_dir_provider_reads_a_whole_file(load: Loader) -> None:
    text = BASE + PROVIDERS + SASL + (
        'A.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule '
        'required username="bob" password="${dir:mounted:password}";\n')
    config = load(text, files={"mounted/password": "from-dir-pw"})
    password = config.flow("A->B").consumer.settings["sasl.password"]
    assert isinstance(password, Secret) and password.reveal() == "from-dir-pw"


@pytest.mark.parametrize(
    ("extra", "env", "key", "message"),
    [
        ("A.bootstrap.servers = ${file:missing.properties:x}\n", {}, "A.bootstrap.servers",
         "cannot read"),
        ("A.bootstrap.servers = ${file:p.properties:nokey}\n", {}, "A.bootstrap.servers",
         "has no key 'nokey'"),
        ("A.bootstrap.servers = ${env:NOT_SET}\n", {}, "A.bootstrap.servers",
         "environment variable NOT_SET is not set"),
        ("A.bootstrap.servers = ${vault:secret/x:y}\n", {}, "A.bootstrap.servers",
         "config.providers does not declare"),
        ("A.bootstrap.servers = ${env:path:VAR}\n", {"VAR": "x:1"}, "A.bootstrap.servers",
         "takes no path"),
    ],
    ids=["missing-file", "missing-key", "unset-env", "undeclared-provider", "env-with-path"],
)
def test_unresolvable_variables_are_errors_naming_the_key(
    load: Loader, extra: str, env: dict[str, str], key: str, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load(BASE + PROVIDERS + extra, files={"p.properties": "other=1\n"}, env=env)
    lines = str(err.value).splitlines()
    assert any(key in line and message in line for line in lines), lines


def test_undeclared_file_provider_names_the_declaration_to_add(load: Loader) -> None:
    with pytest.raises(ConfigError) as err:
        load(BASE + "A.bootstrap.servers = ${file:x.properties:k}\n")
    assert "config.providers.file.class=org.apache.kafka.common.config.provider." \
           "FileConfigProvider" in str(err.value)


def test_allowed_paths_are_enforced(load: Loader, tmp_path: object) -> None:
    text = BASE + PROVIDERS + (
        "config.providers.file.param.allowed.paths = /nonexistent/allowed\n"
        "A.bootstrap.servers = ${file:p.properties:host}\n")
    with pytest.raises(ConfigError, match=r"outside config\.providers\.file\.param\.allowed"):
        load(text, files={"p.properties": "host=a:1\n"})


def test_unknown_provider_class_is_an_error(load: Loader) -> None:
    text = BASE + "config.providers = vault\nconfig.providers.vault.class = com.x.Vault\n"
    with pytest.raises(ConfigError, match="unknown config provider class"):
        load(text)


def test_provider_values_are_secret_in_display(load: Loader) -> None:
    text = BASE + PROVIDERS + "A.consumer.client.rack = ${env:RACK}\n"
    config = load(text, env={"RACK": "rack-secret-value"})
    assert config.flow("A->B").consumer.shown()["client.rack"] == "******"


def test_provider_values_of_public_keys_stay_visible(load: Loader) -> None:
    text = BASE + PROVIDERS + "B.bootstrap.servers = ${env:B_BOOTSTRAP}\n"
    config = load(text, env={"B_BOOTSTRAP": "visible-host:9092"})
    assert config.flow("A->B").producer.shown()["bootstrap.servers"] == "visible-host:9092"


def test_dir_provider_reads_only_files_directly_in_the_directory(load: Loader) -> None:
    text = BASE + PROVIDERS + "A.bootstrap.servers = ${dir:mounted:../outside.txt}\n"
    with pytest.raises(ConfigError, match="is not a file name in"):
        load(text, files={"mounted/x": "1", "outside.txt": "a:1"})


def test_invalid_env_allowlist_pattern_is_a_problem(load: Loader) -> None:
    text = BASE + PROVIDERS + ("config.providers.env.param.allowlist.pattern = (\n"
                               "A.bootstrap.servers = ${env:HOST}\n")
    with pytest.raises(ConfigError, match=r"allowlist\.pattern.*invalid regular expression"):
        load(text, env={"HOST": "a:1"})
