"""The local cluster's certificates and keys, made fresh by every `up` (they live in its run
folder, removed by `down`): one CA, the API server's serving certificate (the node address, the
`kubernetes` Service's ClusterIP and DNS names), the kubelet's serving certificate, the client
certificate the API server presents to the kubelet (`kubectl logs`, `exec`), the key that signs
service-account tokens, and the static tokens of the cluster's own users (admin, kubelet,
controller manager, scheduler, kube-proxy), each bound by Kubernetes' bootstrap RBAC policy or
the Node authorizer as in a kubeadm cluster.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
import secrets

VALIDITY = datetime.timedelta(days=30)


@dataclasses.dataclass(frozen=True)
class Identity:
    """A static token user (kube-apiserver --token-auth-file)."""

    name: str
    user: str
    groups: tuple[str, ...] = ()


def identities(node_name: str) -> tuple[Identity, ...]:
    return (
        Identity("admin", "tfx-scaleout-admin", ("system:masters",)),
        Identity("kubelet", f"system:node:{node_name}", ("system:nodes",)),
        Identity("controller-manager", "system:kube-controller-manager"),
        Identity("scheduler", "system:kube-scheduler"),
        Identity("kube-proxy", "system:kube-proxy"),
    )


@dataclasses.dataclass(frozen=True)
class Pki:
    folder: str
    ca_cert: str
    apiserver_cert: str
    apiserver_key: str
    kubelet_cert: str
    kubelet_key: str
    kubelet_client_cert: str
    kubelet_client_key: str
    service_account_key: str
    token_file: str
    tokens: dict[str, str]  # identity name -> token


def _write(path: str, data: bytes, mode: int = 0o644) -> str:
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as handle:
        handle.write(data)
    return path


def _key_pem(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(subject, issuer, public_key, signing_key, *, ca: bool, sans=(), usages=()):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def _name(common_name: str, organization: str = ""):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def create(
    folder: str, node_name: str, node_ip: str, api_service_ip: str, cluster_domain: str
) -> Pki:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID

    os.makedirs(folder, exist_ok=True)
    pem = serialization.Encoding.PEM
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("tfx-scaleout local cluster CA")
    ca = _certificate(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
    ca_cert = _write(os.path.join(folder, "ca.crt"), ca.public_bytes(pem))

    def issue(stem: str, subject, sans=(), usages=()) -> tuple[str, str]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(
            subject, ca_name, key.public_key(), ca_key, ca=False, sans=sans, usages=usages
        )
        return (
            _write(os.path.join(folder, f"{stem}.crt"), cert.public_bytes(pem)),
            _write(os.path.join(folder, f"{stem}.key"), _key_pem(key), 0o600),
        )

    server = [ExtendedKeyUsageOID.SERVER_AUTH]
    api_names = ["kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    api_names.append(f"kubernetes.default.svc.{cluster_domain}")
    api_sans: list[x509.GeneralName] = [x509.DNSName(n) for n in [*api_names, "localhost"]]
    api_sans += [
        x509.IPAddress(ipaddress.ip_address(ip)) for ip in (node_ip, api_service_ip, "127.0.0.1")
    ]
    apiserver_cert, apiserver_key = issue("apiserver", _name("kube-apiserver"), api_sans, server)
    kubelet_sans: list[x509.GeneralName] = [
        x509.DNSName(node_name),
        x509.IPAddress(ipaddress.ip_address(node_ip)),
    ]
    kubelet_cert, kubelet_key = issue("kubelet", _name(node_name), kubelet_sans, server)
    # The kubelet authorizes the API server's calls through SubjectAccessReview: the
    # system:masters group may do everything.
    client_cert, client_key = issue(
        "apiserver-kubelet-client",
        _name("kube-apiserver-kubelet-client", "system:masters"),
        usages=[ExtendedKeyUsageOID.CLIENT_AUTH],
    )
    account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    service_account_key = _write(
        os.path.join(folder, "service-accounts.key"), _key_pem(account_key), 0o600
    )
    tokens = {identity.name: secrets.token_hex(16) for identity in identities(node_name)}
    lines = []
    for identity in identities(node_name):
        groups = ",".join(identity.groups)
        lines.append(f'{tokens[identity.name]},{identity.user},{identity.user},"{groups}"')
    token_file = _write(
        os.path.join(folder, "tokens.csv"), ("\n".join(lines) + "\n").encode(), 0o600
    )
    return Pki(
        folder=folder,
        ca_cert=ca_cert,
        apiserver_cert=apiserver_cert,
        apiserver_key=apiserver_key,
        kubelet_cert=kubelet_cert,
        kubelet_key=kubelet_key,
        kubelet_client_cert=client_cert,
        kubelet_client_key=client_key,
        service_account_key=service_account_key,
        token_file=token_file,
        tokens=tokens,
    )


def write_kubeconfig(path: str, server: str, ca_cert: str, token: str, user: str) -> str:
    import yaml

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "tfx-scaleout",
                "cluster": {"server": server, "certificate-authority": ca_cert},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": "tfx-scaleout",
                "context": {"cluster": "tfx-scaleout", "user": user, "namespace": "default"},
            }
        ],
        "current-context": "tfx-scaleout",
    }
    _write(path, yaml.safe_dump(config).encode(), 0o600)
    return path
