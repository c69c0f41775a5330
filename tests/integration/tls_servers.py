"""Private TLS servers for the connection tests: a Postgres cluster and a Redis.

Both listen on free loopback ports with certificates signed by a throwaway CA
made here with `cryptography`, and both require a password: the Postgres
cluster accepts only TLS connections authenticated with SCRAM-SHA-256, the
Redis accepts only TLS connections of an ACL user (its default user is off).
Nothing is skipped: a missing binary fails the tests that need it, and
.ci/run installs them.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import psycopg
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.integration.pg_servers import (
    POSTGRES_BIN,
    free_port,
    give,
    run_as_server,
    server_account,
)
from tests.integration.redis_servers import readme_acl

# What the hot head's Redis user needs on one server, as the README states it
# (test_redis_acl.py holds the list exact): SCAN and PING included, which the
# tests' cleanup and this server's start-up probe send.
HOT_HEAD_ACL = " ".join(readme_acl(cluster=False))
# Seconds a new TLS connection to the private Redis, or a reply, may take (see TlsRedis.url).
TIMEOUT = 5


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class CertificateAuthority:
    """A self-signed CA in `directory` (ca.pem), and server certificates it signs."""

    def __init__(self, directory: Path, name: str = "colosseum test CA") -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file = directory / "ca.pem"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, stem: str, hostnames: list[str], directory: Path) -> tuple[Path, Path]:
        """A server certificate for `hostnames` (DNS names or IPs), written to
        `directory`: (cert file, key file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in hostnames:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(hostnames[0]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        cert_file = directory / f"{stem}.crt"
        key_file = directory / f"{stem}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_pem_key(key))
        key_file.chmod(0o600)  # Postgres refuses a key others can read
        return cert_file, key_file


class TlsPostgres:
    """A private PostgreSQL 15 cluster: TLS only, SCRAM-SHA-256, on a free loopback port.

    `user` / `password` own `database`. Connections over the unix socket in the
    cluster's directory (the test's own admin access) are trusted.
    """

    def __init__(self, ca: CertificateAuthority, *, hostname: str = "localhost") -> None:
        if not (POSTGRES_BIN / "initdb").exists():
            raise RuntimeError(
                f"{POSTGRES_BIN}/initdb is missing: the TLS tests need PostgreSQL 15's server "
                "binaries (apt-get install -y postgresql-15, as .ci/run does)"
            )
        self.ca = ca
        self.hostname = hostname
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="colosseum-tls-pg-"))
        self.data = self.directory / "data"
        self.user, self.password, self.database = "agent", "s3cret-Pa55 word", "agents"
        self.process: subprocess.Popen | None = None

    def url(
        self, *, password: str | None = None, sslmode: str = "verify-full", **extra: str
    ) -> str:
        secret = quote(password if password is not None else self.password, safe="")
        query = "&".join(
            f"{k}={quote(str(v), safe='/')}"
            for k, v in {"sslmode": sslmode, "sslrootcert": self.ca.ca_file, **extra}.items()
        )
        return (
            f"postgresql://{self.user}:{secret}@{self.hostname}:{self.port}/{self.database}?{query}"
        )

    def admin_url(self) -> str:
        return f"host={self.directory} port={self.port} user=postgres dbname=postgres"

    def start(self) -> TlsPostgres:
        account = server_account()
        cert, key = self.ca.issue("postgres", [self.hostname], self.directory)
        hba = self.directory / "pg_hba.conf"
        # No `host` line: a connection without TLS has no entry and is refused.
        hba.write_text(
            "local all all trust\n"
            "hostssl all all 127.0.0.1/32 scram-sha-256\n"
            "hostssl all all ::1/128 scram-sha-256\n"
        )
        self.data.mkdir()
        give(self.directory, account)
        user = account.pw_name if account else None
        run_as_server(POSTGRES_BIN / "initdb", "-D", self.data, "-U", "postgres", "-A", "trust")
        self.process = subprocess.Popen(
            [
                str(POSTGRES_BIN / "postgres"),
                *("-D", str(self.data), "-p", str(self.port)),
                *("-c", "listen_addresses=127.0.0.1"),
                *("-c", f"unix_socket_directories={self.directory}"),
                *("-c", f"hba_file={hba}"),
                *("-c", "ssl=on", "-c", f"ssl_cert_file={cert}", "-c", f"ssl_key_file={key}"),
                *("-c", "password_encryption=scram-sha-256"),
                *("-c", "fsync=off", "-c", "synchronous_commit=off"),
                *("-c", "full_page_writes=off", "-c", "max_connections=50"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=(self.directory / "postgres.log").open("wb"),
            user=user,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.admin_url(), autocommit=True) as admin:
                    password = self.password.replace("'", "''")
                    admin.execute(f"CREATE ROLE {self.user} LOGIN PASSWORD '{password}'")
                    admin.execute(f"CREATE DATABASE {self.database} OWNER {self.user}")
                return self
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.directory / "postgres.log").read_text(errors="replace")
                    raise RuntimeError(f"the TLS Postgres did not start:\n{log}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGINT)  # fast shutdown
                try:
                    self.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)


class TlsRedis:
    """A private redis-server: TLS only (no plain port), an ACL user, the default user off."""

    def __init__(self, ca: CertificateAuthority, *, hostname: str = "localhost") -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is missing: the TLS tests need Debian's redis-server, which "
                "is built with TLS (apt-get install -y redis-server, as .ci/run does)"
            )
        self.binary = binary
        self.ca = ca
        self.hostname = hostname
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="colosseum-tls-redis-"))
        self.user, self.password = "colosseum", "r3dis-Pa55"
        self.process: subprocess.Popen | None = None

    def url(self, *, password: str | None = None, ca_file: Path | None = None) -> str:
        """The URL a user writes, with longer timeouts than the hot head's 0.5 s.

        redis-py builds a fresh SSL context for each new connection, loading the
        system's trust store (0.2 to 0.3 s measured on this loaded 2-core machine),
        inside the connect timeout; and a reply read on a busy event loop can take
        longer than 0.5 s here. A URL may raise both, as here, so that the tests
        do not depend on the machine's load.
        """
        secret = quote(password if password is not None else self.password, safe="")
        ca = ca_file or self.ca.ca_file
        return (
            f"rediss://{self.user}:{secret}@{self.hostname}:{self.port}/0"
            f"?ssl_ca_certs={ca}&socket_connect_timeout={TIMEOUT}&socket_timeout={TIMEOUT}"
        )

    def start(self) -> TlsRedis:
        cert, key = self.ca.issue("redis", [self.hostname], self.directory)
        config = self.directory / "redis.conf"
        config.write_text(
            "\n".join(
                [
                    "port 0",  # no plaintext listener at all
                    f"tls-port {self.port}",
                    "bind 127.0.0.1",
                    f"tls-cert-file {cert}",
                    f"tls-key-file {key}",
                    f"tls-ca-cert-file {self.ca.ca_file}",
                    "tls-auth-clients no",  # the client proves itself with its ACL password
                    'save ""',
                    "appendonly no",
                    f"dir {self.directory}",
                    "user default off",
                    # What the hot head needs: its keys, scripts, and nothing else.
                    f"user {self.user} on >{self.password} ~* {HOT_HEAD_ACL}",
                    "",
                ]
            )
        )
        self.process = subprocess.Popen(
            [self.binary, str(config)],
            stdout=(self.directory / "redis.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        import redis

        deadline = time.monotonic() + 15
        while True:
            try:
                with redis.Redis.from_url(self.url(), socket_timeout=2) as client:
                    client.ping()
                return self
            except redis.RedisError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.directory / "redis.log").read_text(errors="replace")
                    raise RuntimeError(f"the TLS redis-server did not start:\n{log}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)


class TlsServers:
    """A CA, and a TLS Postgres and a TLS Redis whose certificates it signed."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="colosseum-tls-ca-"))
        self.ca = CertificateAuthority(self.directory)
        self.postgres = TlsPostgres(self.ca)
        self.redis = TlsRedis(self.ca)

    def start(self) -> TlsServers:
        self.postgres.start()
        try:
            self.redis.start()
        except BaseException:
            self.postgres.stop()
            raise
        return self

    def stop(self) -> None:
        self.redis.stop()
        self.postgres.stop()
