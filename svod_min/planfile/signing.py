"""Signed bundles: ``build --sign KEY`` signs a bundle's manifest, a trust policy runs only what its keys signed.

The manifest pins every entry's size and sha256, so one Ed25519 signature (RFC 8032, :mod:`svod_min.ed25519`)
over its bytes covers the whole bundle. The signature is its own entry, ``manifest.sig`` (the one entry the
manifest does not list), a JSON object naming the key by its fingerprint, the sha256 of its 32 raw bytes::

    {"svod_signature": 1, "algorithm": "ed25519", "key": "<fingerprint>", "signature": "<128 hex digits>"}

What is signed is :data:`CONTEXT` followed by the manifest's bytes, so no other signature made with the key
passes for a bundle's. Keys are the usual PEM files (PKCS #8 ``PRIVATE KEY``, SubjectPublicKeyInfo ``PUBLIC
KEY``), as ``openssl genpkey -algorithm ed25519`` and the ``cryptography`` package write them;
``svod_min keygen -o NAME`` writes ``NAME`` (mode 0600) and ``NAME.pub``.

A :class:`TrustPolicy` (``run --trusted-keys DIR``, ``SVOD_TRUSTED_KEYS``, ``load_model(...,
trusted_keys=...)``: every ``*.pub`` in DIR, or one key file) is checked by
:func:`~svod_min.planfile.bundle.open_bundle` before the manifest is parsed: an unsigned bundle, a key not
trusted or a signature that does not verify is refused with :class:`~svod_min.error.BundleSignatureError`,
and the manifest then checks each entry's sha256 as it is read. Without a policy a signature is not checked
(there is no key to check it against; the manifest's hashes still find corruption).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

from ..config import TRUSTED_KEYS_ENV, trusted_keys_path
from ..error import BundleError, BundleSignatureError, ConfigError, SignatureError
from .bundle import SIGNATURE, BundleSource, describe_bundle, open_bundle

SIGNATURE_FORMAT = 1
ALGORITHM = "ed25519"
#: What a bundle's signature signs: this line, then the manifest's bytes.
CONTEXT = b"svod_min bundle manifest v1\n"
#: The DER of an Ed25519 key before its 32 bytes (RFC 8410): PKCS #8 v1 private key, SubjectPublicKeyInfo.
_PRIVATE_DER = bytes.fromhex("302e020100300506032b657004220420")
_PUBLIC_DER = bytes.fromhex("302a300506032b6570032100")
_PRIVATE_PEM, _PUBLIC_PEM = "PRIVATE KEY", "PUBLIC KEY"
_MAX_KEY_FILE = 4096
PUBLIC_SUFFIX = ".pub"


def fingerprint(public: bytes) -> str:
    """A public key's name in signatures and messages: the sha256 of its 32 bytes, in hex."""
    return hashlib.sha256(public).hexdigest()


# --- key files -------------------------------------------------------------------------


def _pem(label: str, der: bytes) -> bytes:
    import base64

    return b"-----BEGIN %s-----\n%s\n-----END %s-----\n" % (
        label.encode(),
        base64.b64encode(der),
        label.encode(),
    )


def _read_key_file(path: str, label: str, prefix: bytes) -> bytes:
    """The 32 key bytes of the PEM file at ``path`` (``label``: PRIVATE KEY or PUBLIC KEY); ConfigError naming the
    file otherwise."""
    import base64
    import binascii

    what = "an Ed25519 %s file" % label.lower()
    try:
        with open(path, "rb") as fh:
            raw = fh.read(_MAX_KEY_FILE + 1)
    except OSError as exc:
        raise ConfigError("%s: cannot read %s (%s)" % (path, what, exc.strerror or exc)) from None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        text = ""
    lines = [ln.strip() for ln in text.strip().splitlines()]
    begin, end = "-----BEGIN %s-----" % label, "-----END %s-----" % label
    if len(raw) > _MAX_KEY_FILE or len(lines) < 3 or lines[0] != begin or lines[-1] != end:
        raise ConfigError("%s: not %s (PEM %r ... %r)" % (path, what, begin, end))
    try:
        der = base64.b64decode("".join(lines[1:-1]), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("%s: not %s (bad base64)" % (path, what)) from None
    if len(der) != len(prefix) + 32 or not der.startswith(prefix):
        raise ConfigError("%s: not %s (not an Ed25519 key in the RFC 8410 form)" % (path, what))
    return der[len(prefix) :]


def read_public_key(path: str) -> bytes:
    """The 32-byte public key of a ``.pub`` file, checked to be a usable key (not of small order...)."""
    from .. import ed25519

    public = _read_key_file(path, _PUBLIC_PEM, _PUBLIC_DER)
    try:
        ed25519.checked_public_key(public)
    except SignatureError as exc:
        raise ConfigError("%s: not a usable Ed25519 key (%s)" % (path, exc)) from None
    return public


def read_private_key(path: str) -> bytes:
    """The 32-byte seed of a private key file."""
    return _read_key_file(path, _PRIVATE_PEM, _PRIVATE_DER)


def generate_key(name: str) -> str:
    """Write a new key pair: ``name`` (the private key, mode 0600, never overwritten) and ``name.pub``; returns
    the public key's fingerprint."""
    from .. import ed25519

    public_path = name + PUBLIC_SUFFIX
    for path in (name, public_path):
        if os.path.lexists(path):
            raise ConfigError("%s exists: keygen does not overwrite a key (remove it first)" % path)
    seed = os.urandom(ed25519.SEED_BYTES)
    public = ed25519.public_key(seed)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o600)  # whatever the umask
            fh.write(_pem(_PRIVATE_PEM, _PRIVATE_DER + seed))
        with open(public_path, "xb") as fh:
            fh.write(_pem(_PUBLIC_PEM, _PUBLIC_DER + public))
    except OSError as exc:
        raise ConfigError("keygen -o %s: cannot write the key (%s)" % (name, exc.strerror or exc)) from None
    return fingerprint(public)


# --- signing -----------------------------------------------------------------------------


def signer(key_path: str) -> Callable[[bytes], bytes]:
    """``build --sign KEY``: the private key read now (a bad key fails before the build), as the function
    :func:`~svod_min.planfile.bundle.write_bundle` calls with the manifest's bytes to get the signature entry."""
    seed = read_private_key(key_path)

    def sign(manifest: bytes) -> bytes:
        return signature_entry(seed, manifest)

    return sign


def signature_entry(seed: bytes, manifest: bytes) -> bytes:
    """The ``manifest.sig`` entry: the key's fingerprint and its signature of :data:`CONTEXT` + ``manifest``."""
    from .. import ed25519

    record = {
        "svod_signature": SIGNATURE_FORMAT,
        "algorithm": ALGORITHM,
        "key": fingerprint(ed25519.public_key(seed)),
        "signature": ed25519.sign(seed, CONTEXT + manifest).hex(),
    }
    return json.dumps(record, indent=1, sort_keys=True).encode("utf-8") + b"\n"


def parse_signature(raw: bytes) -> Tuple[str, bytes]:
    """(key fingerprint, 64-byte signature) of a ``manifest.sig`` entry; SignatureError naming what is wrong."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SignatureError("not valid JSON (%s)" % exc) from None
    if not isinstance(record, dict):
        raise SignatureError("not a JSON object")
    version = record.get("svod_signature")
    if type(version) is not int or version != SIGNATURE_FORMAT:
        raise SignatureError("unknown signature format %r (this svod_min reads %d)" % (version, SIGNATURE_FORMAT))
    if record.get("algorithm") != ALGORITHM:
        raise SignatureError("algorithm %r; this svod_min checks %r" % (record.get("algorithm"), ALGORITHM))
    key, sig = record.get("key"), record.get("signature")
    if not isinstance(key, str) or not isinstance(sig, str):
        raise SignatureError('"key" and "signature" must be strings')
    try:
        signature = bytes.fromhex(sig)
    except ValueError:
        raise SignatureError('"signature" is not hex') from None
    return key, signature


# --- the trust policy ----------------------------------------------------------------------


@dataclass(frozen=True)
class TrustPolicy:
    """The public keys a host trusts, by fingerprint, and where they came from (for messages). Picklable: the
    Ray and Dask bridges send it to their workers, which then need not read the keys' directory."""

    keys: Tuple[Tuple[str, bytes], ...]
    source: str

    @classmethod
    def from_path(cls, path: str) -> "TrustPolicy":
        """Every ``*.pub`` key in the directory ``path``, or the one key file ``path``."""
        if os.path.isdir(path):
            try:
                names = sorted(n for n in os.listdir(path) if n.endswith(PUBLIC_SUFFIX))
            except OSError as exc:
                raise ConfigError("trusted keys %s: cannot list it (%s)" % (path, exc.strerror or exc)) from None
            files = [os.path.join(path, n) for n in names]
            if not files:
                raise ConfigError("trusted keys %s: the directory holds no *%s key" % (path, PUBLIC_SUFFIX))
        elif os.path.exists(path):
            files = [path]
        else:
            raise ConfigError("trusted keys %s: no such directory or key file" % path)
        keys = {}
        for f in files:
            public = read_public_key(f)
            keys[fingerprint(public)] = public
        return cls(tuple(sorted(keys.items())), path)

    def key_ids(self) -> Tuple[str, ...]:
        return tuple(fp for fp, _ in self.keys)

    def check(self, path: str, manifest: bytes, signature: Optional[bytes]) -> None:
        """Return when ``signature`` (the ``manifest.sig`` entry's bytes, None: absent) is a trusted key's valid
        signature of ``manifest``; BundleSignatureError naming the bundle ``path`` and what failed otherwise."""
        from .. import ed25519

        policy = "the trust policy (%s)" % self.source
        if signature is None:
            raise BundleSignatureError(
                "%s: the bundle is not signed (no %s entry); %s runs only bundles its keys signed"
                % (path, SIGNATURE, policy)
            )
        try:
            key, sig = parse_signature(signature)
        except SignatureError as exc:
            raise BundleSignatureError("%s: entry %s is malformed: %s" % (path, SIGNATURE, exc)) from None
        public = dict(self.keys).get(key)
        if public is None:
            raise BundleSignatureError("%s: signed by key %s, which %s does not trust" % (path, _short(key), policy))
        try:
            ed25519.verify(public, CONTEXT + manifest, sig)
        except SignatureError as exc:
            raise BundleSignatureError(
                "%s: the signature by key %s does not verify (%s): the manifest was changed after signing, "
                "or the signature is not that key's" % (path, _short(key), exc)
            ) from None


def _short(key: str) -> str:
    return key[:16] if len(key) == 64 else repr(key[:80])


#: What ``trusted_keys=`` takes: None (``SVOD_TRUSTED_KEYS`` decides), a directory or key file, a policy.
TrustedKeys = Any


def trust_policy(trusted_keys: TrustedKeys = None) -> Optional[TrustPolicy]:
    """The policy ``trusted_keys`` names: a :class:`TrustPolicy` as is, a path read as one, None: the
    ``SVOD_TRUSTED_KEYS`` environment variable's (no policy when it is unset or empty)."""
    if isinstance(trusted_keys, TrustPolicy):
        return trusted_keys
    if trusted_keys is None:
        path = trusted_keys_path()
        if path is None:
            return None
        try:
            return TrustPolicy.from_path(path)
        except ConfigError as exc:
            raise ConfigError("%s: %s" % (TRUSTED_KEYS_ENV, exc)) from None
    if isinstance(trusted_keys, (str, os.PathLike)):
        return TrustPolicy.from_path(os.fspath(trusted_keys))  # type: ignore[arg-type]
    raise ConfigError(
        "trusted_keys is a directory of *.pub keys, a key file or a TrustPolicy, not %s" % type(trusted_keys).__name__
    )


def refuse_plan_file(source: str, policy: Optional[TrustPolicy]) -> None:
    """Under a policy a plan file (JSON, its kernels' code beside it) is refused: only signed bundles run."""
    if policy is not None:
        raise BundleSignatureError(
            "%s: a plan file, not a signed bundle; the trust policy (%s) runs only bundles its keys signed "
            "(build one with build --sign KEY)" % (source, policy.source)
        )


# --- info -------------------------------------------------------------------------------


def bundle_info_lines(source: BundleSource, trusted_keys: TrustedKeys = None) -> List[str]:
    """What ``info MODEL.svod`` prints: the bundle's description, then whether it is signed, by which key, and
    what the trust policy (``SVOD_TRUSTED_KEYS``, if set) says of it."""
    bundle = open_bundle(source)
    lines = describe_bundle(bundle)
    if bundle.signature is None:
        lines.append("signature: none (unsigned)")
    else:
        try:
            key, _ = parse_signature(bundle.signature)
            lines.append("signature: %s by key %s" % (ALGORITHM, key))
        except SignatureError as exc:
            lines.append("signature: malformed %s entry (%s)" % (SIGNATURE, exc))
    policy = trust_policy(trusted_keys)
    if policy is None:
        lines.append("trust policy: none (%s unset): the signature is not checked" % TRUSTED_KEYS_ENV)
        return lines
    try:
        open_bundle(source, trust=policy)
        lines.append("trust policy (%s): trusted, the signature verifies" % policy.source)
    except BundleError as exc:
        lines.append("trust policy (%s): REFUSED: %s" % (policy.source, exc))
    return lines


__all__ = [
    "ALGORITHM",
    "CONTEXT",
    "SIGNATURE_FORMAT",
    "TrustPolicy",
    "TrustedKeys",
    "bundle_info_lines",
    "fingerprint",
    "generate_key",
    "parse_signature",
    "read_private_key",
    "read_public_key",
    "refuse_plan_file",
    "signature_entry",
    "signer",
    "trust_policy",
]
