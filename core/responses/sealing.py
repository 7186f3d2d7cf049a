"""Reasoning sealed for the client to carry: ``include: ["reasoning.encrypted_content"]``.

A stateless agent loop (``store: false``) sends each reasoning item back as it got it; with the
reasoning sealed into ``encrypted_content`` it may drop the readable text and still continue.
Sealing is Fernet (AES-CBC with an HMAC, from ``cryptography``) under a key derived from
``responses.reasoning_key``; without one, each serving process draws its own at start-up, so
only that process can open what it sealed (set the key for several processes or replicas).
"""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.fernet import Fernet, InvalidToken

__all__ = ["ReasoningSeal"]


class ReasoningSeal:
    """Seals and opens reasoning text under one key."""

    __slots__ = ("_fernet",)

    def __init__(self, secret: str | None = None) -> None:
        key = hashlib.sha256(secret.encode()).digest() if secret else os.urandom(32)
        self._fernet = Fernet(base64.urlsafe_b64encode(key))

    def seal(self, text: str) -> str:
        """``text`` as an opaque token."""
        return self._fernet.encrypt(text.encode()).decode("ascii")

    def open(self, token: str) -> str | None:
        """The text sealed in ``token``; None when it was sealed under another key or changed."""
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except (InvalidToken, UnicodeError, ValueError):
            return None
