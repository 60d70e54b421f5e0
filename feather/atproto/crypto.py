"""atproto public keys: multibase/multikey and did:key → `cryptography` keys, and signature checks.

atproto signs with P-256 ("ES256") or secp256k1 ("ES256K"). DID documents publish the key as
`publicKeyMultibase`: base58btc (`z…`) of a multicodec varint prefix + the compressed point for
type `Multikey`; the legacy `EcdsaSecp256{r,k}1VerificationKey2019` types carry the bare point.
Signatures are raw 64-byte r||s and must be low-S (the spec refuses the malleable high-S twin).
"""
from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = {c: i for i, c in enumerate(_B58)}

# multicodec varints: p256-pub 0x1200, secp256k1-pub 0xe7
_P256_PREFIX = b"\x80\x24"
_K256_PREFIX = b"\xe7\x01"
_CURVES = {"p256": ec.SECP256R1(), "k256": ec.SECP256K1()}
_ORDERS = {
    "p256": 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
    "k256": 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141,
}
_LEGACY_TYPES = {
    "EcdsaSecp256r1VerificationKey2019": "p256",
    "EcdsaSecp256k1VerificationKey2019": "k256",
}


class InvalidKey(ValueError):
    """A key string that is not a supported atproto public key."""


# A point is at most 65 bytes (uncompressed) plus a 2-byte prefix: under 100 base58 characters.
# The decode below is quadratic in its input, and a 64 KB DID document could hold a 64 KB "key".
MAX_B58_CHARS = 128


def b58decode(s: str) -> bytes:
    if len(s) > MAX_B58_CHARS:
        raise InvalidKey(f"A key of {len(s)} base58 characters is longer than any supported key.")
    value = 0
    for ch in s:
        if ch not in _B58_INDEX:
            raise InvalidKey(f"{ch!r} is not a base58 character.")
        value = value * 58 + _B58_INDEX[ch]
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big") if value else b""
    return b"\x00" * (len(s) - len(s.lstrip("1"))) + raw


def b58encode(data: bytes) -> str:
    value = int.from_bytes(data, "big")
    out = ""
    while value:
        value, rem = divmod(value, 58)
        out = _B58[rem] + out
    return "1" * (len(data) - len(data.lstrip(b"\x00"))) + out


def _point(curve: str, data: bytes) -> ec.EllipticCurvePublicKey:
    try:
        return ec.EllipticCurvePublicKey.from_encoded_point(_CURVES[curve], data)
    except ValueError as e:
        raise InvalidKey(f"not a valid {curve} point: {e}") from None


def parse_multikey(multibase: str) -> tuple[str, ec.EllipticCurvePublicKey]:
    """(curve, key) of a Multikey `z…` value; curve is "p256" or "k256"."""
    if not isinstance(multibase, str) or not multibase.startswith("z"):
        raise InvalidKey("Only base58btc multibase keys (starting with 'z') are supported.")
    raw = b58decode(multibase[1:])
    if raw.startswith(_P256_PREFIX):
        return "p256", _point("p256", raw[len(_P256_PREFIX):])
    if raw.startswith(_K256_PREFIX):
        return "k256", _point("k256", raw[len(_K256_PREFIX):])
    raise InvalidKey("The key is neither P-256 nor secp256k1.")


def parse_did_key(did_key: str) -> tuple[str, ec.EllipticCurvePublicKey]:
    if not isinstance(did_key, str) or not did_key.startswith("did:key:"):
        raise InvalidKey("A did:key value must start with 'did:key:'.")
    return parse_multikey(did_key[len("did:key:"):])


def parse_verification_method(method: dict) -> tuple[str, ec.EllipticCurvePublicKey]:
    """The key of one DID-document verificationMethod entry, whatever its (supported) type."""
    kind = method.get("type")
    value = method.get("publicKeyMultibase")
    if not isinstance(value, str):
        raise InvalidKey("The verification method has no publicKeyMultibase.")
    if kind == "Multikey":
        return parse_multikey(value)
    if isinstance(kind, str) and kind in _LEGACY_TYPES:
        if not value.startswith("z"):
            raise InvalidKey("Only base58btc multibase keys are supported.")
        curve = _LEGACY_TYPES[kind]
        return curve, _point(curve, b58decode(value[1:]))
    raise InvalidKey(f"Unsupported verification method type {kind!r}.")


def encode_multikey(key: ec.EllipticCurvePublicKey) -> str:
    """The compressed Multikey form of a public key (used by tests to build DID documents)."""
    prefix = _P256_PREFIX if isinstance(key.curve, ec.SECP256R1) else _K256_PREFIX
    return "z" + b58encode(prefix + key.public_bytes(Encoding.X962, PublicFormat.CompressedPoint))


def verify_signature(key: ec.EllipticCurvePublicKey, message: bytes, signature: bytes) -> bool:
    """Check a raw r||s ECDSA-SHA256 signature; high-S signatures are refused, as atproto requires."""
    if len(signature) != 64:
        return False
    curve = "p256" if isinstance(key.curve, ec.SECP256R1) else "k256"
    r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
    if not (0 < r < _ORDERS[curve] and 0 < s <= _ORDERS[curve] // 2):
        return False
    try:
        key.verify(encode_dss_signature(r, s), message, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True
