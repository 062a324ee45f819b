"""The one error type every user-facing failure in needle-fw is reported with.

A CactError carries a one-line message that names *what* is wrong (the header
field, or the tensor index with its role such as ``layer03.k_proj``) and *where*
(the absolute byte offset in the archive, when there is one).  The CLI prints
``str(err)`` and exits 2; nothing else ever escapes to the user.
"""

from __future__ import annotations


class CactError(Exception):
    """A problem with an archive, an option or an input, reported in one line."""

    def __init__(self, message: str, *, where: str | None = None, offset: int | None = None):
        self.message = message
        self.where = where
        self.offset = offset
        super().__init__(self.__str__())

    def __str__(self) -> str:
        text = self.message
        if self.where:
            text = f"{self.where}: {text}"
        if self.offset is not None:
            text = f"{text} (at byte {self.offset})"
        return text
