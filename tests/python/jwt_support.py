"""Signed JSON Web Tokens for the OAUTHBEARER tests: an ES256 key, its key set (JWKS)
as the broker reads it, and tokens with chosen claims. Made with `cryptography` (what
trustme uses), so no JWT library is needed."""

from __future__ import annotations

import base64
import json
import time

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenIssuer:
    """An identity provider's signing key: `jwks()` for the broker, `token()` for clients."""

    def __init__(self, kid: str = "test-key"):
        self.kid = kid
        self._key = ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> str:
        numbers = self._key.public_key().public_numbers()
        return json.dumps({"keys": [{
            "kty": "EC", "crv": "P-256", "kid": self.kid, "alg": "ES256", "use": "sig",
            "x": _b64(numbers.x.to_bytes(32, "big")), "y": _b64(numbers.y.to_bytes(32, "big")),
        }]})

    def token(self, subject: str, lifetime_s: float = 3600, **claims) -> str:
        now = int(time.time())
        body = {"sub": subject, "iat": now, "exp": int(now + lifetime_s), **claims}
        header = {"alg": "ES256", "typ": "JWT", "kid": self.kid}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(body).encode())}"
        der = self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return f"{signing_input}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"
