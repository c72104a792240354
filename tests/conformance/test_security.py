"""Authentication and authorization with the official client: tokens (valid,
expired, forged, refreshed), basic auth, TLS with client certificates (the
right CA and a wrong one), permissions that stop a role at its namespace, and
the admin API's 401/403. Certificates and keys are made here with openssl and
`strobe tokens`, so nothing secret is committed."""
import base64
import json
import os
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pulsar
import pytest

from conftest import StrobeProcess, free_port, strobe_binary


def run(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw).stdout


def make_ca(d, name):
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
        "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.pem", "-subj", f"/CN={name}")


def make_cert(d, ca, name, cn):
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/{name}.key",
        "-out", f"{d}/{name}.csr", "-subj", f"/CN={cn}")
    run("openssl", "x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/{ca}.pem", "-CAkey", f"{d}/{ca}.key",
        "-CAcreateserial", "-days", "30", "-out", f"{d}/{name}.pem")


class Setup:
    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="strobe-security-")
        d = self.dir = self.tmp.name
        self.bin = strobe_binary()
        make_ca(d, "ca")
        make_ca(d, "other-ca")
        make_cert(d, "ca", "server", "localhost")
        make_cert(d, "ca", "alice-tls", "alice")
        make_cert(d, "ca", "admin-tls", "admin")
        make_cert(d, "other-ca", "forged-admin", "admin")
        run(self.bin, "tokens", "create-secret-key", "--output", f"{d}/secret.key")
        run(self.bin, "tokens", "create-secret-key", "--output", f"{d}/other.key")
        pw = run("openssl", "passwd", "-apr1", "s3cret").strip()
        with open(f"{d}/htpasswd", "w") as f:
            f.write(f"alice:{pw}\n")
        self.tls_port, self.https_port = free_port(), free_port()
        config = f"""
broker_port_tls = {self.tls_port}
http_port_tls = {self.https_port}
tls_certificate_file = "{d}/server.pem"
tls_key_file = "{d}/server.key"
tls_trust_certs_file = "{d}/ca.pem"
authentication_enabled = true
authentication_providers = ["token", "basic", "tls"]
token_secret_key = "file://{d}/secret.key"
basic_auth_htpasswd_file = "{d}/htpasswd"
authorization_enabled = true
superuser_roles = ["admin"]
auth_refresh_check_secs = 1
"""
        self.strobe = StrobeProcess(self.bin, config)
        self.admin_token = self.token("admin")
        for method, path, body in [
            ("PUT", "tenants/acme", {"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]}),
            ("PUT", "namespaces/acme/orders", {"auth_policies": {"namespace_auth": {"alice": ["produce", "consume"]}}}),
            ("PUT", "namespaces/acme/secret", {}),
        ]:
            assert self.http(method, path, body, token=self.admin_token)[0] == 204

    def token(self, subject, key="secret.key", expiry=None):
        args = [self.bin, "tokens", "create", "--subject", subject, "--secret-key", f"file://{self.dir}/{key}"]
        if expiry:
            args += ["--expiry-time", expiry]
        return run(*args).strip()

    def http(self, method, path, body=None, token=None, headers=None):
        h = {"Content-Type": "application/json", **(headers or {})}
        if token:
            h["Authorization"] = f"Bearer {token}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.strobe.http_port}/admin/v2/{path}",
                                     data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def client(self, auth=None, tls=False, trust="ca.pem"):
        if tls:
            return pulsar.Client(f"pulsar+ssl://127.0.0.1:{self.tls_port}", authentication=auth,
                                 tls_trust_certs_file_path=f"{self.dir}/{trust}",
                                 operation_timeout_seconds=5)
        return pulsar.Client(self.strobe.url, authentication=auth, operation_timeout_seconds=5)


@pytest.fixture(scope="module")
def sec():
    s = Setup()
    yield s
    s.strobe.stop()
    s.tmp.cleanup()


# The C++ core of the Python client treats an ERROR in answer to CONNECT as a
# dropped connection and retries until its operation timeout, so a refused
# CONNECT reaches the application as Timeout (against Pulsar too); the
# broker's AuthenticationError and its reason are in the broker's log
# (tests/security.rs checks the frame itself).
REFUSED = (pulsar.AuthenticationError, pulsar.Timeout)


def refused_for(sec, reason):
    log = sec.strobe.log_text()
    assert "authentication failed" in log and reason in log, log[-2000:]


def roundtrip(client, topic):
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"hello")
    assert consumer.receive(5000).data() == b"hello"


def test_valid_token_produces_and_consumes(sec):
    c = sec.client(pulsar.AuthenticationToken(sec.token("alice")))
    try:
        roundtrip(c, "persistent://acme/orders/token-ok")
    finally:
        c.close()


def test_expired_token_is_refused(sec):
    token = sec.token("alice", expiry="1s")
    time.sleep(2)
    c = sec.client(pulsar.AuthenticationToken(token))
    try:
        with pytest.raises(REFUSED):
            c.create_producer("persistent://acme/orders/expired")
    finally:
        c.close()
    refused_for(sec, "token expired")


def test_forged_token_is_refused(sec):
    c = sec.client(pulsar.AuthenticationToken(sec.token("admin", key="other.key")))
    try:
        with pytest.raises(REFUSED):
            c.create_producer("persistent://acme/orders/forged")
    finally:
        c.close()
    refused_for(sec, "token signature does not verify")


def test_no_credentials_and_no_anonymous_role_is_refused(sec):
    c = sec.client()
    try:
        with pytest.raises(REFUSED):
            c.create_producer("persistent://acme/orders/anonymous")
    finally:
        c.close()
    refused_for(sec, "no anonymous role")


def test_role_cannot_reach_into_another_namespace(sec):
    c = sec.client(pulsar.AuthenticationToken(sec.token("alice")))
    try:
        with pytest.raises(pulsar.AuthorizationError):
            c.create_producer("persistent://acme/secret/not-yours")
        with pytest.raises(pulsar.AuthorizationError):
            c.subscribe("persistent://acme/secret/not-yours", "s")
        with pytest.raises(pulsar.AuthorizationError):
            c.create_producer("persistent://public/default/not-yours-either")
    finally:
        c.close()
    # The tenant's admin role may use every namespace of its tenant.
    admin = sec.client(pulsar.AuthenticationToken(sec.token("acme-admin")))
    try:
        roundtrip(admin, "persistent://acme/secret/tenant-admin")
    finally:
        admin.close()


def test_basic_auth(sec):
    ok = sec.client(pulsar.AuthenticationBasic("alice", "s3cret"))
    try:
        roundtrip(ok, "persistent://acme/orders/basic")
    finally:
        ok.close()
    bad = sec.client(pulsar.AuthenticationBasic("alice", "guess"))
    try:
        with pytest.raises(REFUSED):
            bad.create_producer("persistent://acme/orders/basic")
    finally:
        bad.close()
    refused_for(sec, "unknown user or invalid password")


def test_tls_client_certificate_is_the_role(sec):
    d = sec.dir
    c = sec.client(pulsar.AuthenticationTLS(f"{d}/alice-tls.pem", f"{d}/alice-tls.key"), tls=True)
    try:
        roundtrip(c, "persistent://acme/orders/tls")
        with pytest.raises(pulsar.AuthorizationError):
            c.create_producer("persistent://acme/secret/tls")
    finally:
        c.close()


def test_certificate_from_the_wrong_ca_is_refused(sec):
    d = sec.dir
    c = sec.client(pulsar.AuthenticationTLS(f"{d}/forged-admin.pem", f"{d}/forged-admin.key"), tls=True)
    try:
        with pytest.raises(Exception) as e:
            c.create_producer("persistent://acme/secret/forged-tls")
        assert not isinstance(e.value, AssertionError)
    finally:
        c.close()
    assert "TLS handshake failed" in sec.strobe.log_text()
    # A client that does not trust the broker's CA does not get through either.
    wrong_trust = sec.client(pulsar.AuthenticationToken(sec.token("alice")), tls=True, trust="other-ca.pem")
    try:
        with pytest.raises(Exception):
            wrong_trust.create_producer("persistent://acme/orders/wrong-trust")
    finally:
        wrong_trust.close()


def test_expiring_token_is_refreshed_by_auth_challenge(sec):
    calls = []

    def supplier():
        calls.append(time.time())
        return sec.token("alice", expiry="2s")

    c = sec.client(pulsar.AuthenticationToken(supplier))
    try:
        producer = c.create_producer("persistent://acme/orders/refresh")
        end = time.time() + 6
        while time.time() < end:
            producer.send(b"still here")
            time.sleep(0.2)
        assert len(calls) >= 2, "the broker's AUTH_CHALLENGE fetched a new token"
    finally:
        c.close()
    assert "credentials expired" in sec.strobe.log_text()


def test_admin_api_401_403(sec):
    assert sec.http("GET", "tenants")[0] == 401
    assert sec.http("GET", "tenants", token=sec.token("alice"))[0] == 403
    assert sec.http("GET", "tenants", token=sec.admin_token)[0] == 200
    assert sec.http("PUT", "tenants/evil", {}, token=sec.token("acme-admin"))[0] == 403
    assert sec.http("POST", "namespaces/acme/orders/messageTTL", 5, token=sec.token("acme-admin"))[0] == 204
    assert sec.http("POST", "namespaces/acme/orders/messageTTL", 5, token=sec.token("alice"))[0] == 403
    basic = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    assert sec.http("GET", "namespaces/acme/orders/topics", headers={"Authorization": basic})[0] == 200
    assert sec.http("GET", "namespaces/acme/orders/topics",
                    headers={"Authorization": "Basic " + base64.b64encode(b"alice:nope").decode()})[0] == 401
    # HTTPS with a client certificate: CN=admin is a superuser.
    ctx = ssl.create_default_context(cafile=f"{sec.dir}/ca.pem")
    ctx.check_hostname = False
    ctx.load_cert_chain(f"{sec.dir}/admin-tls.pem", f"{sec.dir}/admin-tls.key")
    with urllib.request.urlopen(f"https://127.0.0.1:{sec.https_port}/admin/v2/tenants", context=ctx, timeout=10) as r:
        assert r.status == 200 and "acme" in json.loads(r.read())
    # Metrics stay open, as in Pulsar.
    with urllib.request.urlopen(f"http://127.0.0.1:{sec.strobe.http_port}/metrics", timeout=10) as r:
        assert r.status == 200
    assert "s3cret" not in sec.strobe.log_text() and sec.admin_token not in sec.strobe.log_text()


def admin_cli(sec, *args, url=None, trust="ca.pem"):
    cmd = [sec.bin, "admin", "--url", url or f"https://127.0.0.1:{sec.https_port}"]
    if trust:
        cmd += ["--tls-trust-cert-path", f"{sec.dir}/{trust}"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=60)


def test_admin_cli_on_a_secured_broker(sec):
    token = ["--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken",
             "--auth-params", f"token:{sec.admin_token}"]
    # A token over HTTPS, with pulsar-admin's plugin class name and parameters.
    r = admin_cli(sec, *token, "tenants", "list")
    assert r.returncode == 0 and "acme" in r.stdout, r.stderr
    # The token read from a file.
    with open(f"{sec.dir}/admin.token", "w") as f:
        f.write(sec.admin_token + "\n")
    r = admin_cli(sec, "--auth-plugin", "token", "--auth-params", f"file://{sec.dir}/admin.token",
                  "namespaces", "list", "acme")
    assert r.returncode == 0 and "acme/orders" in r.stdout, r.stderr
    # A client certificate: CN=admin is a superuser.
    r = admin_cli(sec, "--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationTls",
                  "--auth-params", f"tlsCertFile:{sec.dir}/admin-tls.pem,tlsKeyFile:{sec.dir}/admin-tls.key",
                  "tenants", "list")
    assert r.returncode == 0 and "acme" in r.stdout, r.stderr
    # Basic auth over plain HTTP: alice may list her namespace's topics, a wrong password may not.
    plain = f"http://127.0.0.1:{sec.strobe.http_port}"
    r = admin_cli(sec, "--auth-plugin", "basic", "--auth-params", '{"userId":"alice","password":"s3cret"}',
                  "topics", "list", "acme/orders", url=plain, trust=None)
    assert r.returncode == 0, r.stderr
    r = admin_cli(sec, "--auth-plugin", "basic", "--auth-params", "alice:nope",
                  "topics", "list", "acme/orders", url=plain, trust=None)
    assert r.returncode != 0 and "HTTP 401" in r.stderr, r.stderr
    # No credentials, and a role that is not an admin.
    r = admin_cli(sec, "tenants", "list")
    assert r.returncode != 0 and "HTTP 401" in r.stderr, r.stderr
    r = admin_cli(sec, "--auth-plugin", "token", "--auth-params", f"token:{sec.token('alice')}", "tenants", "list")
    assert r.returncode != 0 and "HTTP 403" in r.stderr, r.stderr
    # A broker certificate that does not chain to the trusted CA is refused.
    r = admin_cli(sec, *token, "tenants", "list", trust="other-ca.pem")
    assert r.returncode != 0 and "TLS handshake" in r.stderr, r.stderr
    # Names are escaped per path segment: without that, this would GET tenant "acme".
    r = admin_cli(sec, *token, "tenants", "get", "acme?x=/../evil")
    assert r.returncode != 0 and "HTTP 404" in r.stderr, r.stderr
    r = admin_cli(sec, *token, "tenants", "get", "acme")
    assert r.returncode == 0, r.stderr
    assert sec.admin_token not in r.stdout + r.stderr
