"""Signed bundles: Ed25519 against RFC 8032's vectors and ``cryptography``, keygen, build --sign and run
--trusted-keys, and every way of tampering refused (exit 2) before any code is mapped executable."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import stat
import struct
import subprocess
import sys
import zipfile
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from conftest import needs_cc

import svod_min.jit_loader.memory as jit_memory
from svod_min import ed25519
from svod_min.__main__ import main
from svod_min.compiler.targets import host_target
from svod_min.error import BundleError, BundleSignatureError, ConfigError, SignatureError
from svod_min.planfile.bundle import MANIFEST, PLAN, SIGNATURE, open_bundle
from svod_min.planfile.bundle_build import build_bundle_from_document
from svod_min.planfile.load import load_plan
from svod_min.planfile.signing import (
    TrustPolicy,
    generate_key,
    read_private_key,
    read_public_key,
    signature_entry,
    signer,
)

# --- Ed25519 ----------------------------------------------------------------------------------

#: RFC 8032 section 7.1: TEST 1, 2, 3, 1024 and SHA(abc) (secret key, public key, message, signature).
_M1024 = (
    "08b8b2b733424243760fe426a4b54908632110a66c2f6591eabd3345e3e4eb98fa6e264bf09efe12ee50f8f54e9f77b1e355f6c5"
    "0544e23fb1433ddf73be84d879de7c0046dc4996d9e773f4bc9efe5738829adb26c81b37c93a1b270b20329d658675fc6ea534e0"
    "810a4432826bf58c941efb65d57a338bbd2e26640f89ffbc1a858efcb8550ee3a5e1998bd177e93a7363c344fe6b199ee5d02e82"
    "d522c4feba15452f80288a821a579116ec6dad2b3b310da903401aa62100ab5d1a36553e06203b33890cc9b832f79ef80560ccb9"
    "a39ce767967ed628c6ad573cb116dbefefd75499da96bd68a8a97b928a8bbc103b6621fcde2beca1231d206be6cd9ec7aff6f6c9"
    "4fcd7204ed3455c68c83f4a41da4af2b74ef5c53f1d8ac70bdcb7ed185ce81bd84359d44254d95629e9855a94a7c1958d1f8ada5"
    "d0532ed8a5aa3fb2d17ba70eb6248e594e1a2297acbbb39d502f1a8c6eb6f1ce22b3de1a1f40cc24554119a831a9aad6079cad88"
    "425de6bde1a9187ebb6092cf67bf2b13fd65f27088d78b7e883c8759d2c4f5c65adb7553878ad575f9fad878e80a0c9ba63bcbcc"
    "2732e69485bbc9c90bfbd62481d9089beccf80cfe2df16a2cf65bd92dd597b0707e0917af48bbb75fed413d238f5555a7a569d80"
    "c3414a8d0859dc65a46128bab27af87a71314f318c782b23ebfe808b82b0ce26401d2e22f04d83d1255dc51addd3b75a2b1ae078"
    "4504df543af8969be3ea7082ff7fc9888c144da2af58429ec96031dbcad3dad9af0dcbaaaf268cb8fcffead94f3c7ca495e056a9"
    "b47acdb751fb73e666c6c655ade8297297d07ad1ba5e43f1bca32301651339e22904cc8c42f58c30c04aafdb038dda0847dd988d"
    "cda6f3bfd15c4b4c4525004aa06eeff8ca61783aacec57fb3d1f92b0fe2fd1a85f6724517b65e614ad6808d6f6ee34dff7310fdc"
    "82aebfd904b01e1dc54b2927094b2db68d6f903b68401adebf5a7e08d78ff4ef5d63653a65040cf9bfd4aca7984a74d371459867"
    "80fc0b16ac451649de6188a7dbdf191f64b5fc5e2ab47b57f7f7276cd419c17a3ca8e1b939ae49e488acba6b965610b5480109c8"
    "b17b80e1b7b750dfc7598d5d5011fd2dcc5600a32ef5b52a1ecc820e308aa342721aac0943bf6686b64b2579376504ccc493d97e"
    "6aed3fb0f9cd71a43dd497f01f17c0e2cb3797aa2a2f256656168e6c496afc5fb93246f6b1116398a346f1a641f3b041e989f791"
    "4f90cc2c7fff357876e506b50d334ba77c225bc307ba537152f3f1610e4eafe595f6d9d90d11faa933a15ef1369546868a7f3a45"
    "a96768d40fd9d03412c091c6315cf4fde7cb68606937380db2eaaa707b4c4185c32eddcdd306705e4dc1ffc872eeee475a64dfac"
    "86aba41c0618983f8741c5ef68d3a101e8a3b8cac60c905c15fc910840b94c00a0b9d0"
)
VECTORS = {
    "TEST 1": (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe2"
        "4655141438e7a100b",
    ),
    "TEST 2": (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302ae"
        "eb00d291612bb0c00",
    ),
    "TEST 3": (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28"
        "dc027beceea1ec40a",
    ),
    "TEST 1024": (
        "f5e5767cf153319517630f226876b86c8160cc583bc013744c6bf255f5cc0ee5",
        "278117fc144c72340f67d0f2316e8386ceffbf2b2428c9c51fef7c597f1d426e",
        _M1024,
        "0aab4c900501b3e24d7cdf4663326a3a87df5e4843b2cbdb67cbf6e460fec350aa5371b1508f9f4528ecea23c436d94b5e8fcd4f681e30a"
        "6ac00a9704a188a03",
    ),
    "TEST SHA(abc)": (
        "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
        "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
        "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e"
        "2a9ac94fa54ca49f",
        "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17"
        "ad9bef1177331a704",
    ),
}


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_rfc8032_vectors(name: str) -> None:
    seed, public, message, signature = (bytes.fromhex(h) for h in VECTORS[name])
    assert ed25519.public_key(seed) == public
    assert ed25519.sign(seed, message) == signature
    ed25519.verify(public, message, signature)
    with pytest.raises(SignatureError, match="does not match"):
        ed25519.verify(public, message + b"!", signature)
    flipped = bytearray(signature)
    flipped[40] ^= 0x01  # inside S
    with pytest.raises(SignatureError):
        ed25519.verify(public, message, bytes(flipped))


def test_the_sha_abc_vector_signs_sha512_of_abc() -> None:
    assert VECTORS["TEST SHA(abc)"][2] == hashlib.sha512(b"abc").hexdigest()
    assert len(bytes.fromhex(_M1024)) == 1023


def test_sign_and_verify_agree_with_cryptography() -> None:
    crypto = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519")
    rng = random.Random(8032)
    for size in (0, 1, 31, 64, 200, 1000):
        seed = bytes(rng.getrandbits(8) for _ in range(32))
        message = bytes(rng.getrandbits(8) for _ in range(size))
        theirs = crypto.Ed25519PrivateKey.from_private_bytes(seed)
        ours = ed25519.sign(seed, message)
        assert ours == theirs.sign(message)  # Ed25519 is deterministic: one signature per key and message
        theirs.public_key().verify(ours, message)
        ed25519.verify(ed25519.public_key(seed), message, theirs.sign(message))


def _encode_y(y: int, sign: int = 0) -> bytes:
    return (y | (sign << 255)).to_bytes(32, "little")


_KEY = bytes.fromhex(VECTORS["TEST 2"][1])
_MESSAGE = bytes.fromhex(VECTORS["TEST 2"][2])
_SIG = bytes.fromhex(VECTORS["TEST 2"][3])


@pytest.mark.parametrize(
    "public, signature, why",
    [
        # S + L: the same point equation holds, but a second signature of one message is malleability
        (_KEY, _SIG[:32] + (int.from_bytes(_SIG[32:], "little") + ed25519.L).to_bytes(32, "little"), "group order"),
        (_KEY, _SIG[:32] + b"\xff" * 32, "group order"),
        (_encode_y(ed25519.P), _SIG, "not reduced"),  # y = p: a second encoding of y = 0
        (_encode_y(ed25519.P + 1), _SIG, "not reduced"),  # y = p + 1: of the identity
        (_encode_y(1), _SIG, "small order"),  # the identity
        (_encode_y(ed25519.P - 1), _SIG, "small order"),  # (0, -1), order 2
        (_encode_y(0), _SIG, "small order"),  # (sqrt(-1), 0), order 4
        (_encode_y(1, sign=1), _SIG, "x = 0 and its sign bit"),  # -0
        (_encode_y(2), _SIG, "not encode a point"),  # (y^2 - 1)/(d y^2 + 1) has no square root for y = 2
        (_KEY, _encode_y(1) + bytes(32), "R is a point of small order"),
        (_KEY, _SIG[:63], "64 bytes"),
        (_KEY[:31], _SIG, "32 bytes"),
    ],
    ids=[
        "S+L",
        "S-too-big",
        "y=p",
        "y=p+1",
        "identity-key",
        "order-2-key",
        "order-4-key",
        "minus-zero",
        "off-curve",
        "small-order-R",
        "short-signature",
        "short-key",
    ],
)
def test_strict_verification_refuses(public: bytes, signature: bytes, why: str) -> None:
    with pytest.raises(SignatureError, match=why):
        ed25519.verify(public, _MESSAGE, signature)


def test_cryptography_refuses_s_plus_l_too() -> None:
    crypto = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519")
    from cryptography.exceptions import InvalidSignature

    malleated = _SIG[:32] + (int.from_bytes(_SIG[32:], "little") + ed25519.L).to_bytes(32, "little")
    with pytest.raises(InvalidSignature):
        crypto.Ed25519PublicKey.from_public_bytes(_KEY).verify(malleated, _MESSAGE)


# --- keys -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """Two key pairs (``good``, ``other``) and a trust directory holding only ``good.pub``."""
    root = tmp_path_factory.mktemp("keys")
    paths = {name: str(root / name) for name in ("good", "other")}
    for path in paths.values():
        generate_key(path)
    trust = root / "trusted"
    trust.mkdir()
    shutil.copy(paths["good"] + ".pub", str(trust / "good.pub"))
    (trust / "README").write_text("not a key: only *.pub files are read\n")
    paths["trusted"] = str(trust)
    return paths


def test_keygen_writes_a_private_key_only_its_owner_reads(keys: Dict[str, str], tmp_path: Any) -> None:
    assert stat.S_IMODE(os.stat(keys["good"]).st_mode) == 0o600
    seed = read_private_key(keys["good"])
    assert read_public_key(keys["good"] + ".pub") == ed25519.public_key(seed)
    name = str(tmp_path / "k")
    assert main(["keygen", "-o", name]) == 0
    assert main(["keygen", "-o", name]) == 2  # never overwrites a key
    with pytest.raises(ConfigError, match="not an Ed25519 private key"):
        read_private_key(name + ".pub")


def test_keys_are_the_pem_files_cryptography_reads_and_writes(keys: Dict[str, str], tmp_path: Any) -> None:
    pytest.importorskip("cryptography")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    with open(keys["good"], "rb") as fh:
        theirs = serialization.load_pem_private_key(fh.read(), password=None)
    raw = serialization.Encoding.Raw
    assert theirs.public_key().public_bytes(raw, serialization.PublicFormat.Raw) == read_public_key(
        keys["good"] + ".pub"
    )
    made = Ed25519PrivateKey.generate()
    path = tmp_path / "made"
    path.write_bytes(
        made.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    assert read_private_key(str(path)) == made.private_bytes(
        raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


def test_a_trust_policy_needs_keys(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="holds no \\*.pub key"):
        TrustPolicy.from_path(str(tmp_path))
    with pytest.raises(ConfigError, match="no such directory"):
        TrustPolicy.from_path(str(tmp_path / "absent"))
    (tmp_path / "bad.pub").write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    with pytest.raises(ConfigError, match="bad.pub: not an Ed25519 public key"):
        TrustPolicy.from_path(str(tmp_path))


# --- bundles ------------------------------------------------------------------------------------

_N = 20000  # float32 arrays of 80 KB: stored and deferred, read straight into their buffers
ADD_C = (
    "void add_seven(float* restrict y, const float* restrict x, int n) {\n"
    "  for (int i = 0; i < n; i++) y[i] = x[i] + 7.0f;\n"
    "}\n"
)


def _npy(values: List[float]) -> bytes:
    header = ("{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % len(values)).ljust(117) + "\n"
    return b"\x93NUMPY\x01\x00v\x00" + header.encode() + struct.pack("<%df" % len(values), *values)


def _document() -> Tuple[Dict[str, Any], Dict[str, bytes]]:
    """One C kernel (its object in the bundle), its input and its expected output as large .npy entries."""
    doc = {
        "svod_plan": 1,
        "buffers": {
            "x": {"dtype": "float32", "shape": [_N], "init": {"npy": "data/x.npy"}},
            "y": {"dtype": "float32", "shape": [_N], "output": True},
        },
        "kernels": {
            "add_seven": {"source": ADD_C, "buffers": 2, "outputs": [0], "vars": ["n"], "extents": {"1": "n"}},
        },
        "ops": [{"kernel": "add_seven", "buffers": ["y", "x"], "vars": {"n": _N}}],
        "expect": {"y": {"npy": "expect/y.npy"}},
    }
    x = [i * 0.5 for i in range(_N)]
    return doc, {"data/x.npy": _npy(x), "expect/y.npy": _npy([v + 7.0 for v in x])}


@pytest.fixture(scope="module")
def signed(keys: Dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    if not (shutil.which("clang") or shutil.which("gcc")):
        pytest.skip("no C compiler to build the bundle with")
    doc, files = _document()
    path = str(tmp_path_factory.mktemp("signed") / "add.svod")
    build_bundle_from_document(doc, files, path, targets=[host_target() or "x86_64"], sign=signer(keys["good"]))
    return path


class MapSpy:
    """Counts the loader's commits (where an image's pages become executable)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = jit_memory.commit

        def commit(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(jit_memory, "commit", commit)


def _members(path: str) -> List[Tuple[zipfile.ZipInfo, bytes]]:
    with zipfile.ZipFile(path) as zf:
        return [(i, zf.read(i)) for i in zf.infolist()]


def _write(path: str, members: List[Tuple[zipfile.ZipInfo, bytes]]) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        for info, data in members:
            zf.writestr(info, data)  # each keeps its compression: stored arrays stay deferred
    return path


def _edited(source: str, out: str, change: Callable[[str, bytes], Optional[bytes]]) -> str:
    """``source`` with each entry's bytes replaced by ``change(name, data)`` (None: dropped)."""
    members = []
    for info, data in _members(source):
        new = change(info.filename, data)
        if new is not None:
            members.append((info, new))
    return _write(out, members)


def _flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0x01])


def _object_entry(path: str) -> str:
    return next(n for n in open_bundle(path).entries if n.startswith("objects/"))


def _repinned(manifest: bytes, name: str, data: bytes) -> bytes:
    """The manifest with ``name``'s sha256 and size changed to ``data``'s (what a substitution would need)."""
    m = json.loads(manifest)
    m["entries"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return json.dumps(m, indent=1, sort_keys=True).encode() + b"\n"


def _tampered(how: str, source: str, out: str, keys: Dict[str, str]) -> str:
    """``source`` changed the way ``how`` names, written to ``out``."""
    obj = _object_entry(source)
    if how == "object modified":
        return _edited(source, out, lambda n, d: _flip_last_byte(d) if n == obj else d)
    if how == "deferred array modified":  # read after the kernels unless a policy is set
        return _edited(source, out, lambda n, d: _flip_last_byte(d) if n == "expect/y.npy" else d)
    if how == "plan modified":
        return _edited(source, out, lambda n, d: d.replace(b"7.0f", b"9.0f") if n == PLAN else d)
    members = dict((i.filename, d) for i, d in _members(source))
    new_obj = _flip_last_byte(members[obj])
    manifest = _repinned(members[MANIFEST], obj, new_obj)
    if how == "object and manifest modified":
        return _edited(source, out, lambda n, d: new_obj if n == obj else manifest if n == MANIFEST else d)
    if how == "re-signed with another key":
        sig = signature_entry(read_private_key(keys["other"]), manifest)
        return _edited(
            source,
            out,
            lambda n, d: new_obj if n == obj else manifest if n == MANIFEST else sig if n == SIGNATURE else d,
        )
    if how == "signature entry removed":
        return _edited(source, out, lambda n, d: None if n == SIGNATURE else d)
    if how == "signature malleated":  # S + L: the same equation, a second signature
        record = json.loads(members[SIGNATURE])
        sig = bytes.fromhex(record["signature"])
        record["signature"] = (sig[:32] + (int.from_bytes(sig[32:], "little") + ed25519.L).to_bytes(32, "little")).hex()
        return _edited(source, out, lambda n, d: json.dumps(record).encode() if n == SIGNATURE else d)
    if how == "truncated":
        with open(source, "rb") as fh:
            data = fh.read()
        with open(out, "wb") as fh:
            fh.write(data[: len(data) - 200])
        return out
    raise AssertionError(how)


TAMPERING = {
    "object modified": BundleError,  # the manifest (signed) pins its sha256
    "deferred array modified": BundleError,
    "plan modified": BundleError,
    "object and manifest modified": BundleSignatureError,
    "re-signed with another key": BundleSignatureError,
    "signature entry removed": BundleSignatureError,
    "signature malleated": BundleSignatureError,
    "truncated": BundleError,
}


@needs_cc
@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_tampering_is_refused_before_anything_is_mapped(
    how: str, signed: str, keys: Dict[str, str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = _tampered(how, signed, str(tmp_path / "bad.svod"), keys)
    spy = MapSpy(monkeypatch)
    with pytest.raises(TAMPERING[how]) as caught:
        load_plan(bad, trusted_keys=keys["trusted"])
    assert str(caught.value).startswith(bad)  # the message names the bundle
    assert spy.calls == 0
    assert main(["run", bad, "--trusted-keys", keys["trusted"]]) == 2
    assert spy.calls == 0


@needs_cc
def test_a_signed_bundle_loads_under_the_policy_and_the_spy_sees_its_kernel(
    signed: str, keys: Dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = MapSpy(monkeypatch)
    loaded = load_plan(signed, trusted_keys=keys["trusted"])
    assert spy.calls >= 1  # the spy would see a kernel mapped before a refusal
    loaded.plan.execute()
    assert all(ok for _, ok, _ in loaded.verify())
    assert load_plan(signed, trusted_keys=keys["good"] + ".pub").verify()  # one key file is a policy too


@needs_cc
def test_without_a_policy_a_bad_array_is_found_after_the_kernels_are_mapped(
    signed: str, keys: Dict[str, str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order the policy changes: without one, an array no buffer reads is checked at the end."""
    bad = _tampered("deferred array modified", signed, str(tmp_path / "bad.svod"), keys)
    spy = MapSpy(monkeypatch)
    with pytest.raises(BundleError, match="expect/y.npy"):
        load_plan(bad)
    assert spy.calls >= 1


@needs_cc
def test_unsigned_bundles_and_plan_files_are_refused_under_a_policy(
    keys: Dict[str, str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc, files = _document()
    unsigned = str(tmp_path / "unsigned.svod")
    build_bundle_from_document(doc, files, unsigned, targets=[host_target() or "x86_64"])
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(doc))
    spy = MapSpy(monkeypatch)
    with pytest.raises(BundleSignatureError, match="unsigned.svod: the bundle is not signed"):
        load_plan(unsigned, trusted_keys=keys["trusted"])
    with pytest.raises(BundleSignatureError, match="a plan file, not a signed bundle"):
        load_plan(str(plan_file), trusted_keys=keys["trusted"])
    monkeypatch.setenv("SVOD_TRUSTED_KEYS", keys["trusted"])
    assert main(["run", unsigned]) == 2
    with open(unsigned, "rb") as fh:
        with pytest.raises(BundleSignatureError):
            load_plan(fh.read())  # a bundle's bytes too
    assert spy.calls == 0


def test_build_sign_run_trusted_keys_on_the_command_line(
    keys: Dict[str, str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    signed_path, unsigned_path = str(tmp_path / "s.svod"), str(tmp_path / "u.svod")
    assert main(["build", "-o", signed_path, "--target", "x86_64", "--sign", keys["good"]]) == 0
    assert main(["build", "-o", unsigned_path, "--target", "x86_64"]) == 0
    assert main(["build", "-o", str(tmp_path / "x.svod"), "--sign", keys["good"] + ".pub"]) == 2  # not a private key
    assert main(["run", signed_path, "--trusted-keys", keys["trusted"]]) == 0
    assert main(["run", unsigned_path, "--trusted-keys", keys["trusted"]]) == 2
    assert main(["run", unsigned_path]) == 0  # no policy: as before
    capsys.readouterr()
    assert main(["info", signed_path]) == 0
    fingerprint = hashlib.sha256(read_public_key(keys["good"] + ".pub")).hexdigest()
    assert "signature: ed25519 by key %s" % fingerprint in capsys.readouterr().out
    monkeypatch.setenv("SVOD_TRUSTED_KEYS", keys["trusted"])
    assert main(["run", signed_path]) == 0
    assert main(["run", unsigned_path]) == 2
    assert "not signed" in capsys.readouterr().err
    assert main(["info", unsigned_path]) == 0
    assert "REFUSED" in capsys.readouterr().out
    monkeypatch.setenv("SVOD_TRUSTED_KEYS", str(tmp_path / "nowhere"))
    assert main(["run", signed_path]) == 2  # a policy that names no keys is an error, never no policy


def test_signing_is_deterministic_and_the_signature_is_its_own_entry(keys: Dict[str, str], tmp_path: Any) -> None:
    a, b = str(tmp_path / "a.svod"), str(tmp_path / "b.svod")
    for path in (a, b):
        assert main(["build", "-o", path, "--target", "x86_64", "--sign", keys["good"]]) == 0
    with open(a, "rb") as fa, open(b, "rb") as fb:
        assert fa.read() == fb.read()
    bundle = open_bundle(a)
    assert SIGNATURE not in bundle.manifest["entries"] and bundle.signature is not None


def test_the_batch_bridge_passes_the_policy(keys: Dict[str, str], tmp_path: Any) -> None:
    pytest.importorskip("numpy")
    from svod_min.interop import batches

    signed_path, unsigned_path = str(tmp_path / "s.svod"), str(tmp_path / "u.svod")
    assert main(["build", "-o", signed_path, "--target", "x86_64", "--sign", keys["good"]]) == 0
    assert main(["build", "-o", unsigned_path, "--target", "x86_64"]) == 0
    with pytest.raises(BundleSignatureError):
        batches.plan_document(unsigned_path, keys["trusted"])
    with open(unsigned_path, "rb") as fh:
        data = fh.read()
    runner = batches.cached_runner(data)  # loaded without a policy...
    assert runner is batches.cached_runner(data)
    with pytest.raises(BundleSignatureError):  # ...is not handed out under one
        batches.cached_runner(data, trusted_keys=keys["trusted"])
    assert batches.load_runner(signed_path, trusted_keys=keys["trusted"]).layout.rows >= 1


# --- the one-file runtime ---------------------------------------------------------------------------


def _python38() -> Optional[str]:
    found = shutil.which("python3.8")
    if found is None:
        return None
    proc = subprocess.run([found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def test_the_zipapp_on_a_bare_python_verifies_a_signed_bundle(pyz: str, keys: Dict[str, str], tmp_path: Any) -> None:
    python = _python38() or sys.executable
    signed_path, unsigned_path = str(tmp_path / "s.svod"), str(tmp_path / "u.svod")
    assert main(["build", "-o", signed_path, "--target", "x86_64", "--sign", keys["good"]]) == 0
    assert main(["build", "-o", unsigned_path, "--target", "x86_64"]) == 0
    env = {"PATH": "/usr/bin:/bin", "SVOD_OBJECT_CACHE": "0", "HOME": str(tmp_path), "LANG": "C.UTF-8"}

    def run(bundle: str) -> subprocess.CompletedProcess:
        cmd = [python, "-I", "-S", pyz, "run", bundle, "--once", "--trusted-keys", keys["trusted"]]
        return subprocess.run(cmd, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=120)

    ok = run(signed_path)
    assert ok.returncode == 0, ok.stderr
    refused = run(unsigned_path)
    assert refused.returncode == 2 and "not signed" in refused.stderr


def test_an_onnx_build_is_signed_too(keys: Dict[str, str], tmp_path: Any) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    model = str(tmp_path / "relu.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    out = str(tmp_path / "relu.svod")
    assert main(["build", model, "-o", out, "--target", "x86_64", "--no-expect", "--sign", keys["good"]]) == 0
    assert open_bundle(out).signature is not None
    assert main(["run", out, "--trusted-keys", keys["trusted"]]) == 0
