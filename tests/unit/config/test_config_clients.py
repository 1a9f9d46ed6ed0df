"""Java client settings -> librdkafka: security, stores, renamed keys, refused keys."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from ferry.errors import ConfigError
from ferry.secrets import Secret
from tests.unit.conftest import BASE, Loader


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA as PEM, PKCS12 truststore, PKCS12 and PEM keystores, and a fake JKS file."""
    root = tmp_path_factory.mktemp("stores")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ferry-test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    enc = serialization.BestAvailableEncryption(b"store-pw")
    paths = {
        "ca.pem": pem,
        "trust.p12": pkcs12.serialize_key_and_certificates(None, None, None, [cert], enc),
        "client.p12": pkcs12.serialize_key_and_certificates(b"c", key, cert, None, enc),
        "client.pem": key_pem + pem,
        "trust.jks": b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + b"\x00" * 64,
    }
    for file, data in paths.items():
        (root / file).write_bytes(data)
    return {k: root / k for k in paths}


SASL_SSL = BASE + """
A.security.protocol = SASL_SSL
A.sasl.mechanism = SCRAM-SHA-512
A.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="mirror" password="scram-secret";
"""


def test_sasl_ssl_scram(load: Loader) -> None:
    settings = load(SASL_SSL).flow("A->B").consumer.settings
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["sasl.mechanism"] == "SCRAM-SHA-512"
    assert settings["sasl.username"] == "mirror"
    assert settings["sasl.password"] == Secret("scram-secret")
    assert "sasl.jaas.config" not in settings


def test_pem_truststore_becomes_ca_location(load: Loader, stores: dict[str, Path]) -> None:
    text = SASL_SSL + f"A.ssl.truststore.location = {stores['ca.pem']}\n" \
                      "A.ssl.truststore.type = PEM\n"
    assert load(text).flow("A->B").consumer.settings["ssl.ca.location"] == str(stores["ca.pem"])


def test_pkcs12_truststore_is_converted_to_pem(load: Loader, stores: dict[str, Path]) -> None:
    text = SASL_SSL + (f"A.ssl.truststore.location = {stores['trust.p12']}\n"
                       "A.ssl.truststore.type = PKCS12\nA.ssl.truststore.password = store-pw\n")
    ca = load(text).flow("A->B").consumer.settings["ssl.ca.pem"]
    assert ca == stores["ca.pem"].read_text()


def test_pkcs12_truststore_with_wrong_password_is_an_error(
    load: Loader, stores: dict[str, Path]
) -> None:
    text = SASL_SSL + (f"A.ssl.truststore.location = {stores['trust.p12']}\n"
                       "A.ssl.truststore.password = wrong\n")
    with pytest.raises(ConfigError, match=r"A\.ssl\.truststore\.location.*cannot open PKCS12"):
        load(text)


def test_jks_truststore_is_refused_with_the_conversion_command(
    load: Loader, stores: dict[str, Path]
) -> None:
    text = SASL_SSL + f"A.ssl.truststore.location = {stores['trust.jks']}\n"
    with pytest.raises(ConfigError) as err:
        load(text)
    message = str(err.value)
    assert "JKS stores are Java-only" in message
    assert "keytool -importkeystore" in message and "-deststoretype PKCS12" in message


def test_declared_type_contradicting_the_file_is_an_error(
    load: Loader, stores: dict[str, Path]
) -> None:
    text = SASL_SSL + (f"A.ssl.truststore.location = {stores['ca.pem']}\n"
                       "A.ssl.truststore.type = PKCS12\n")
    with pytest.raises(ConfigError, match=r"says PKCS12, but .* is PEM"):
        load(text)


def test_inline_pem_truststore(load: Loader, stores: dict[str, Path]) -> None:
    pem = stores["ca.pem"].read_text().replace("\n", "\\n\\\n")
    text = SASL_SSL + f"A.ssl.truststore.type = PEM\nA.ssl.truststore.certificates = {pem}\n"
    assert "BEGIN CERTIFICATE" in str(load(text).flow("A->B").consumer.settings["ssl.ca.pem"])


def test_pkcs12_keystore_is_passed_to_librdkafka(load: Loader, stores: dict[str, Path]) -> None:
    text = BASE + (f"A.security.protocol = SSL\nA.ssl.keystore.location = {stores['client.p12']}\n"
                   "A.ssl.keystore.type = PKCS12\nA.ssl.keystore.password = store-pw\n")
    settings = load(text).flow("A->B").consumer.settings
    assert settings["ssl.keystore.location"] == str(stores["client.p12"])
    assert settings["ssl.keystore.password"] == Secret("store-pw")


def test_pem_keystore_file_gives_certificate_and_key(
    load: Loader, stores: dict[str, Path]
) -> None:
    text = BASE + (f"A.security.protocol = SSL\nA.ssl.keystore.location = {stores['client.pem']}\n"
                   "A.ssl.keystore.type = PEM\nA.ssl.key.password = kpw\n")
    settings = load(text).flow("A->B").consumer.settings
    assert settings["ssl.certificate.location"] == str(stores["client.pem"])
    assert settings["ssl.key.location"] == str(stores["client.pem"])
    assert settings["ssl.key.password"] == Secret("kpw")


@pytest.mark.parametrize(
    ("value", "expected"), [("https", "https"), ("", "none"), ("HTTPS", "https")]
)
def test_endpoint_identification(load: Loader, value: str, expected: str) -> None:
    text = BASE + f"A.security.protocol = SSL\nA.ssl.endpoint.identification.algorithm = {value}\n"
    settings = load(text).flow("A->B").consumer.settings
    assert settings["ssl.endpoint.identification.algorithm"] == expected


def test_event_hubs_connection_string(load: Loader) -> None:
    text = BASE + (
        "B.bootstrap.servers = ns.servicebus.windows.net:9093\n"
        "B.security.protocol = SASL_SSL\nB.sasl.mechanism = PLAIN\n"
        'B.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="$ConnectionString" password="Endpoint=sb://ns.servicebus.windows.net/;'
        'SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=eh-key-123=";\n'
        "A->B.ferry.delivery = at_least_once\n")
    config = load(text)
    settings = config.flow("A->B").producer.settings
    assert settings["sasl.username"] == "$ConnectionString"
    assert isinstance(settings["sasl.password"], Secret)
    assert "SharedAccessKey=eh-key-123=" in settings["sasl.password"].reveal()
    assert not any("Event Hubs" in w for w in config.warnings)


def test_oauthbearer_oidc(load: Loader) -> None:
    text = BASE + (
        "A.security.protocol = SASL_SSL\nA.sasl.mechanism = OAUTHBEARER\n"
        "A.sasl.login.callback.handler.class = "
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
        "A.sasl.oauthbearer.token.endpoint.url = https://idp/token\n"
        "A.sasl.jaas.config = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
        ' required clientId="ferry" clientSecret="oidc-secret" scope="kafka";\n')
    settings = load(text).flow("A->B").consumer.settings
    assert settings["sasl.oauthbearer.method"] == "oidc"
    assert settings["sasl.oauthbearer.client.id"] == "ferry"
    assert settings["sasl.oauthbearer.client.secret"] == Secret("oidc-secret")
    assert settings["sasl.oauthbearer.scope"] == "kafka"


@pytest.mark.parametrize(
    ("key", "value", "java", "rdkafka"),
    [("A.consumer.fetch.max.wait.ms", "250", "consumer", ("fetch.wait.max.ms", "250")),
     ("A.consumer.auto.offset.reset", "none", "consumer", ("auto.offset.reset", "error")),
     ("B.producer.max.request.size", "2000000", "producer", ("message.max.bytes", "2000000")),
     ("B.producer.max.in.flight.requests.per.connection", "1", "producer",
      ("max.in.flight", "1")),
     ("B.producer.compression.type", "zstd", "producer", ("compression.type", "zstd")),
     ("A.consumer.receive.buffer.bytes", "65536", "consumer",
      ("socket.receive.buffer.bytes", "65536")),
     ("A.ferry.librdkafka.fetch.queue.backoff.ms", "5", "consumer",
      ("fetch.queue.backoff.ms", "5"))],
    ids=["fetch-wait", "offset-reset-none", "max-request-size", "in-flight", "compression",
         "receive-buffer", "passthrough"],
)
def test_java_settings_are_renamed(
    load: Loader, key: str, value: str, java: str, rdkafka: tuple[str, str]
) -> None:
    flow = load(BASE + f"{key} = {value}\n").flow("A->B")
    client = flow.consumer if java == "consumer" else flow.producer
    assert client.settings[rdkafka[0]] == rdkafka[1]


def test_harmless_java_settings_are_dropped(load: Loader) -> None:
    text = BASE + ("A.consumer.max.poll.records = 500\n"
                   "A.consumer.key.deserializer = org.apache.kafka.common.serialization.X\n"
                   "B.producer.partitioner.class = x.Y\nA.ssl.enabled.protocols = TLSv1.3\n")
    flow = load(text).flow("A->B")
    assert "max.poll.records" not in flow.consumer.settings
    assert "partitioner.class" not in flow.producer.settings


@pytest.mark.parametrize(
    ("line", "message"),
    [("A.consumer.interceptor.classes = x.Y", "is not supported"),
     ("A.consumer.frobnicate.ms = 1", "has no librdkafka equivalent"),
     ("A.security.protocol = SASL_SSL\nA.sasl.mechanism = GSSAPI",
      r"GSSAPI \(Kerberos\) is not supported"),
     ("A.security.protocol = SASL_SSL", "A.sasl.mechanism: is not set"),
     ("A.security.protocol = TLS", "must be one of PLAINTEXT"),
     ("A.security.protocol = SASL_SSL\nA.sasl.mechanism = PLAIN",
      "sasl.jaas.config: is required for PLAIN"),
     ("A.security.protocol = SASL_SSL\nA.sasl.mechanism = PLAIN\n"
      "A.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required "
      'username="u" password="p";', "uses ScramLoginModule, but sasl.mechanism=PLAIN"),
     ("A.ssl.truststore.location = /nope.pem\nA.security.protocol = SSL", "file not found"),
     ("A.ssl.cipher.suites = TLS_AES_128_GCM_SHA256\nA.security.protocol = SSL",
      "OpenSSL names"),
     ("B.producer.transactional.id = x", "Ferry assigns transactional ids")],
    ids=["interceptor", "unknown", "gssapi", "no-mechanism", "bad-protocol", "no-jaas",
         "module-mismatch", "missing-truststore", "cipher-suites", "transactional-id"],
)
def test_unsupported_security_and_client_settings_are_errors(
    load: Loader, line: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load(BASE + line + "\n")


def test_pem_with_leading_bag_attributes_and_jks_typed_pkcs12_are_accepted(
    load: Loader, stores: dict[str, Path], tmp_path: Path
) -> None:
    bagged = tmp_path / "bagged.pem"
    bagged.write_bytes(b"Bag Attributes\n    friendlyName: ca\n" + b"x" * 80 + b"\n"
                       + stores["ca.pem"].read_bytes())
    text = SASL_SSL + f"A.ssl.truststore.location = {bagged}\n"
    assert load(text).flow("A->B").consumer.settings["ssl.ca.location"] == str(bagged)
    text = SASL_SSL + (f"A.ssl.truststore.location = {stores['trust.p12']}\n"
                       "A.ssl.truststore.type = JKS\nA.ssl.truststore.password = store-pw\n")
    assert "BEGIN CERTIFICATE" in str(load(text).flow("A->B").consumer.settings["ssl.ca.pem"])
